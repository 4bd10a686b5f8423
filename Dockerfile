# runtimed, static, in a distroless image, as uid 65532.
#   docker build -t runtimed .
#   docker run --rm -p 127.0.0.1:4500:4500 -v "$PWD/token:/run/secrets/token:ro" runtimed \
#     serve --listen ws://0.0.0.0:4500 --insecure-listen --auth-token-file /run/secrets/token
# The image holds runtimed alone (no shell, no tools): the processes it
# starts come from the image they run in. For a sandbox image with tools,
# copy the binary into it:
#   COPY --from=runtimed /usr/local/bin/runtimed /usr/local/bin/runtimed
# See docs/operations.md.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN scripts/build-static.sh /out/runtimed && /out/runtimed version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/runtimed /usr/local/bin/runtimed
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 4500 9464
ENTRYPOINT ["/usr/local/bin/runtimed"]
CMD ["serve", "--listen", "ws://127.0.0.1:4500"]

// Package deploy validates the deployment files offline: the Kubernetes
// manifests (decoded strictly into the API types, then checked against
// each other and against runtimed's own flags), the kustomization (rendered
// with kubectl when it is installed), the systemd unit (systemd-analyze
// verify when installed) and the Dockerfile. It is a module of its own so
// that the Kubernetes types stay out of the main module.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const kdir = "kubernetes"

// kustomization is the part of kustomize's schema this directory uses;
// decoding it strictly catches a misspelt field.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Resources       []string `json:"resources"`
	SecretGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"secretGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// manifests holds the decoded objects of the directory.
type manifests struct {
	kust kustomization
	sts  *appsv1.StatefulSet
	svc  *corev1.Service
	np   *networkingv1.NetworkPolicy
}

// splitDocs splits a YAML stream into documents.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// decodeStrict decodes one document into the type its kind names; unknown
// fields, wrong types and duplicate keys are errors.
func decodeStrict(t *testing.T, name string, doc []byte, m *manifests) {
	t.Helper()
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var dst any
	switch meta.Kind {
	case "StatefulSet":
		m.sts = &appsv1.StatefulSet{}
		dst = m.sts
	case "Service":
		m.svc = &corev1.Service{}
		dst = m.svc
	case "NetworkPolicy":
		m.np = &networkingv1.NetworkPolicy{}
		dst = m.np
	case "Secret":
		dst = &corev1.Secret{}
	default:
		t.Fatalf("%s: unexpected kind %q", name, meta.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, dst); err != nil {
		t.Fatalf("%s (%s): %v", name, meta.Kind, err)
	}
}

func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	kb, err := os.ReadFile(filepath.Join(kdir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(kb, &m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(kdir, "*.yaml"))
	var listed []string
	for _, r := range m.kust.Resources {
		listed = append(listed, filepath.Join(kdir, r))
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(listed, f) {
			t.Errorf("%s is not listed in kustomization.yaml resources", f)
		}
	}
	for _, f := range listed {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("kustomization resource: %v", err)
		}
		for i, d := range splitDocs(b) {
			decodeStrict(t, fmt.Sprintf("%s[%d]", f, i), d, m)
		}
	}
	if m.sts == nil || m.svc == nil || m.np == nil {
		t.Fatalf("want a StatefulSet, a Service and a NetworkPolicy; got %v %v %v", m.sts != nil, m.svc != nil, m.np != nil)
	}
	return m
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	p, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("address %q has no port", addr)
	}
	return int32(p)
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// mountedFile reports whether path is a key of a secret volume mounted in c.
func mountedSecretFile(c corev1.Container, vols []corev1.Volume, path string) (secret string, ok bool) {
	for _, vm := range c.VolumeMounts {
		if rest, found := strings.CutPrefix(path, vm.MountPath+"/"); found {
			for _, v := range vols {
				if v.Name == vm.Name && v.Secret != nil {
					return v.Secret.SecretName + "/" + rest, vm.ReadOnly
				}
			}
		}
	}
	return "", false
}

// TestKubernetesManifests: the manifests decode strictly and agree with
// each other and with the daemon's flags.
func TestKubernetesManifests(t *testing.T) {
	m := load(t)
	sts := m.sts
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Error("replicas must be 1: sessions live in one pod's memory")
	}
	if sts.Spec.ServiceName != m.svc.Name {
		t.Errorf("serviceName %q, Service is %q", sts.Spec.ServiceName, m.svc.Name)
	}
	pod := sts.Spec.Template
	for k, v := range sts.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template", k, v)
		}
	}
	for name, sel := range map[string]map[string]string{"Service": m.svc.Spec.Selector, "NetworkPolicy": m.np.Spec.PodSelector.MatchLabels} {
		if len(sel) == 0 {
			t.Errorf("%s selects every pod", name)
		}
		for k, v := range sel {
			if pod.Labels[k] != v {
				t.Errorf("%s selector %s=%s does not match the pod", name, k, v)
			}
		}
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	args := c.Args

	// Listening: TLS with a token on the port the Service and policy name.
	listen, _ := flagValue(args, "listen")
	if !strings.HasPrefix(listen, "wss://") {
		t.Errorf("--listen %q: a pod listens beyond loopback, so with TLS (wss://)", listen)
	}
	rp, ok := containerPort(c, "runtimed")
	if !ok || rp != portOf(t, listen) {
		t.Errorf("containerPort runtimed %d does not match --listen %q", rp, listen)
	}
	metricsAddr, ok := flagValue(args, "metrics-listen")
	if !ok {
		t.Fatal("no --metrics-listen: the probes and Prometheus need it")
	}
	mp, ok := containerPort(c, "metrics")
	if !ok || mp != portOf(t, metricsAddr) {
		t.Errorf("containerPort metrics %d does not match --metrics-listen %q", mp, metricsAddr)
	}
	if pod.Annotations["prometheus.io/port"] != strconv.Itoa(int(mp)) {
		t.Errorf("prometheus.io/port %q, metrics port %d", pod.Annotations["prometheus.io/port"], mp)
	}
	for _, f := range []string{"auth-token-file", "tls-cert", "tls-key"} {
		path, ok := flagValue(args, f)
		if !ok {
			t.Errorf("--%s missing", f)
			continue
		}
		secret, ro := mountedSecretFile(c, pod.Spec.Volumes, path)
		if secret == "" || !ro {
			t.Errorf("--%s %s is not a key of a read-only secret volume", f, path)
		}
		if f == "auth-token-file" {
			gen := ""
			for _, g := range m.kust.SecretGenerator {
				for _, file := range g.Files {
					key, _, _ := strings.Cut(file, "=")
					gen = g.Name + "/" + key
				}
			}
			if secret != gen {
				t.Errorf("--auth-token-file reads %s, the kustomization generates %s", secret, gen)
			}
		}
	}
	for _, sp := range m.svc.Spec.Ports {
		if sp.TargetPort.Type != intstr.String {
			t.Errorf("Service port %s: target by name", sp.Name)
		} else if _, ok := containerPort(c, sp.TargetPort.StrVal); !ok {
			t.Errorf("Service port %s targets %q, not a container port", sp.Name, sp.TargetPort.StrVal)
		}
	}
	if m.svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("the Service is headless: one stable name per sandbox pod")
	}

	// The NetworkPolicy admits the protocol port only from labelled clients.
	var protoRule *networkingv1.NetworkPolicyIngressRule
	for i, r := range m.np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.StrVal == "runtimed" {
				protoRule = &m.np.Spec.Ingress[i]
			}
			if p.Port != nil && p.Port.Type == intstr.String {
				if _, ok := containerPort(c, p.Port.StrVal); !ok {
					t.Errorf("NetworkPolicy port %q is not a container port", p.Port.StrVal)
				}
			}
		}
	}
	if protoRule == nil || len(protoRule.From) == 0 || protoRule.From[0].PodSelector == nil || len(protoRule.From[0].PodSelector.MatchLabels) == 0 {
		t.Error("the NetworkPolicy must admit the protocol port from labelled pods only")
	}

	// Probes: liveness /healthz, readiness /readyz, on the metrics port.
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := "/healthz"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.StrVal != "metrics" {
			t.Errorf("%s probe: want GET %s on port metrics, got %+v", name, want, p)
		}
	}

	// Termination: the grace covers --shutdown-grace and the drain.
	grace := 2 * time.Second
	if v, ok := flagValue(args, "shutdown-grace"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("--shutdown-grace %q: %v", v, err)
		}
		grace = d
	}
	tgp := pod.Spec.TerminationGracePeriodSeconds
	if tgp == nil || time.Duration(*tgp)*time.Second < grace+5*time.Second {
		got := "unset"
		if tgp != nil {
			got = strconv.FormatInt(*tgp, 10)
		}
		t.Errorf("terminationGracePeriodSeconds %s must be at least --shutdown-grace %v + 5 s", got, grace)
	}

	// Security context: non-root, no escalation, no capabilities, read-only root.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the pod must run as a non-root uid")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod needs the RuntimeDefault seccomp profile")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container securityContext must forbid escalation, drop ALL, add none, read-only root: %+v", sc)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("processes in the pod must not get a Kubernetes API token")
	}
	// Writable places for processes: the working directory and /tmp.
	mounts := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = !vm.ReadOnly
	}
	if !mounts[c.WorkingDir] || !mounts["/tmp"] {
		t.Errorf("workingDir %q and /tmp must be writable mounts (the root is read-only)", c.WorkingDir)
	}

	// Resources: requests and limits for CPU and memory.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || lim.Cmp(req) < 0 {
			t.Errorf("%s: request %v, limit %v", r, req.String(), lim.String())
		}
	}
}

// TestManifestFlagsExist: every flag the StatefulSet and the systemd unit
// pass to runtimed serve is one it has (the real binary's help is asked).
func TestManifestFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds runtimed")
	}
	out, err := exec.Command("go", "-C", "..", "run", "./cmd/runtimed", "serve", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("runtimed serve -h: %v\n%s", err, out)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	if !known["listen"] || !known["tls-cert"] {
		t.Fatalf("could not read the flags from:\n%s", out)
	}
	m := load(t)
	unit, err := os.ReadFile(filepath.Join("systemd", "runtimed.service"))
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{"statefulset": m.sts.Spec.Template.Spec.Containers[0].Args}
	for _, f := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(execStart(string(unit)), -1) {
		sources["unit"] = append(sources["unit"], "--"+f[1])
	}
	for src, args := range sources {
		n := 0
		for _, a := range args {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			n++
			if !known[name] {
				t.Errorf("%s passes --%s, which runtimed serve does not have", src, name)
			}
		}
		if n < 4 {
			t.Errorf("%s: only %d flags found", src, n)
		}
	}
}

// execStart returns the ExecStart command of a unit, continuation lines joined.
func execStart(unit string) string {
	unit = strings.ReplaceAll(unit, "\\\n", " ")
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			return v
		}
	}
	return ""
}

// TestKustomizeBuild renders the kustomization with kubectl (skipped when
// kubectl is not installed) and decodes every rendered object strictly: the
// generated token Secret's hashed name must be what the StatefulSet mounts.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; the strict decode of TestKubernetesManifests still ran")
	}
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(kdir, "*.yaml"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Without token.txt the build must fail (no default token is shipped).
	if out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput(); err == nil || !bytes.Contains(out, []byte("token.txt")) {
		t.Fatalf("kustomize without token.txt: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "token.txt"), []byte("test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	m := &manifests{}
	var secrets []corev1.Secret
	for i, d := range splitDocs(out) {
		decodeStrict(t, fmt.Sprintf("rendered[%d]", i), d, m)
		var s corev1.Secret
		if yaml.Unmarshal(d, &s) == nil && s.Kind == "Secret" {
			secrets = append(secrets, s)
		}
	}
	if len(secrets) != 1 || string(secrets[0].Data["token"]) != "test-token\n" {
		t.Fatalf("rendered secrets: %+v", secrets)
	}
	found := false
	for _, v := range m.sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secrets[0].Name {
			found = true
		}
	}
	if !found {
		t.Errorf("the StatefulSet does not mount the generated secret %s", secrets[0].Name)
	}
	for _, obj := range []map[string]string{m.sts.Labels, m.svc.Labels, m.np.Labels, secrets[0].Labels} {
		if obj["app.kubernetes.io/part-of"] != "runtimed" {
			t.Errorf("rendered object lacks the common label: %v", obj)
		}
	}
}

// TestSystemdUnit: the hardening the unit must keep, and (when installed)
// systemd-analyze verify finds no unknown or invalid settings.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("systemd", "runtimed.service")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Delegate=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectControlGroups=no", "KillMode=mixed", "ExecReload=/bin/kill -HUP $MAINPID", "User=runtimed"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(unit) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindStringSubmatch(unit)
	if m == nil {
		t.Error("no TimeoutStopSec")
	} else if n, _ := strconv.Atoi(m[1]); n < 7 {
		t.Errorf("TimeoutStopSec=%d must cover --shutdown-grace 2s + 5 s", n)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	root := t.TempDir()
	for _, p := range []string{"usr/local/bin/runtimed", "bin/kill"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ud := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(ud, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ud, "runtimed.service"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(analyze, "verify", "--man=no", "--generators=no", "--root="+root, filepath.Join(ud, "runtimed.service")).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		// Units of the real system (sysinit.target ...) are absent from the
		// empty root; anything about this unit's own settings is an error.
		if strings.Contains(l, "Unknown") || strings.Contains(l, "Invalid") || strings.Contains(l, "Failed to parse") || strings.Contains(l, "not executable") || strings.Contains(l, "ignoring") {
			t.Errorf("systemd-analyze verify: %s", l)
		}
	}
}

// TestDockerfile: a static build through the same script as the tests, a
// distroless (or scratch) final stage, a non-root numeric user, and the
// ports of the manifests exposed.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 {
		t.Fatalf("want a build stage and a final stage, got %v", froms)
	}
	final := froms[len(froms)-1][1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final stage %q: want distroless/static or scratch", final)
	}
	if !strings.Contains(df, "scripts/build-static.sh") {
		t.Error("the Dockerfile must build with scripts/build-static.sh (CGO_ENABLED=0), like TestStaticBinaryInEmptyRoot")
	}
	if _, err := os.Stat(filepath.Join("..", "scripts", "build-static.sh")); err != nil {
		t.Error(err)
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\d+)(:\d+)?\s*$`).FindStringSubmatch(df)
	if user == nil || user[1] == "0" {
		t.Errorf("want USER with a non-zero numeric uid (runAsNonRoot checks it), got %v", user)
	}
	m := load(t)
	if user != nil && m.sts.Spec.Template.Spec.SecurityContext.RunAsUser != nil && strconv.FormatInt(*m.sts.Spec.Template.Spec.SecurityContext.RunAsUser, 10) != user[1] {
		t.Errorf("Dockerfile USER %s, StatefulSet runAsUser %d", user[1], *m.sts.Spec.Template.Spec.SecurityContext.RunAsUser)
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE\s+(.+)$`).FindStringSubmatch(df)
	c := m.sts.Spec.Template.Spec.Containers[0]
	for _, name := range []string{"runtimed", "metrics"} {
		p, _ := containerPort(c, name)
		if expose == nil || !slices.Contains(strings.Fields(expose[1]), strconv.Itoa(int(p))) {
			t.Errorf("Dockerfile does not EXPOSE the %s port %d", name, p)
		}
	}
}

//go:build !linux

package fsops

func reportsBirthTime(string) bool { return false }

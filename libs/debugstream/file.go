package debugstream

import (
	"net/http"
	"path"
	"strings"
)

// MaxLogFilePath is the longest file path a file log may name.
const MaxLogFilePath = 1024

// forbiddenLogDirs hold what the platform never lets a file log read: the
// kernel's and devices' pseudo files, and the mounted secrets.
var forbiddenLogDirs = []string{"/proc", "/sys", "/dev", "/run/secrets", "/var/run/secrets"}

// CheckLogFile says whether a file log may follow p: an absolute, clean
// path of printable characters, not under /proc, /sys, /dev or a secrets
// mount. The refusal is a 400 *Error.
func CheckLogFile(p string) error {
	switch {
	case p == "":
		return Errorf(http.StatusBadRequest, "file is empty")
	case len(p) > MaxLogFilePath:
		return Errorf(http.StatusBadRequest, "file path is longer than %d bytes", MaxLogFilePath)
	case !strings.HasPrefix(p, "/"):
		return Errorf(http.StatusBadRequest, "file %q is not an absolute path", p)
	case path.Clean(p) != p || p == "/":
		return Errorf(http.StatusBadRequest, "file %q is not a clean path to a file (no .., //, or trailing /)", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Errorf(http.StatusBadRequest, "file path has control characters")
	}
	for _, d := range forbiddenLogDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return Errorf(http.StatusBadRequest, "file %q is under %s, which the platform does not let file logs read", p, d)
		}
	}
	return nil
}

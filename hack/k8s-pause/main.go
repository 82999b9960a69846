// Command k8s-pause is the sandbox ("pause") container of the one-node
// cluster hack/k8s-up.sh starts: it holds a Pod's namespaces open, reaps
// the zombies handed to it as PID 1, and exits on SIGTERM or SIGINT. It is
// built static and packed FROM scratch, so no image is pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"

	"atoll.dev/libs/sdk"
)

// watchResize sends the terminal's size now and on every SIGWINCH, until stop.
func watchResize(fd int, ch chan sdk.TerminalSize) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	done := make(chan struct{})
	sendSize(fd, ch)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				sendSize(fd, ch)
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

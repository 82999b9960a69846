//go:build !unix

package cli

import "atoll.dev/libs/sdk"

// watchResize sends the terminal's size once: there is no SIGWINCH here.
func watchResize(fd int, ch chan sdk.TerminalSize) (stop func()) {
	sendSize(fd, ch)
	return func() {}
}

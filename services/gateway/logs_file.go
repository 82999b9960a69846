package gateway

import (
	"net/http"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/debugstream"
)

// fileLogParams checks a file log's parameters before it is opened: the
// path the platform allows, and no sinceSeconds (a file has no times).
func fileLogParams(p computeapi.StreamLogsParams) error {
	if err := debugstream.CheckLogFile(p.File); err != nil {
		return err
	}
	if p.SinceSeconds > 0 {
		return debugstream.Errorf(http.StatusBadRequest, "sinceSeconds does not apply to a file log")
	}
	return nil
}

package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"atoll.dev/libs/computeapi"
)

// Logs calls fn with each log line of a workload's pods, across clusters,
// read as NDJSON. Without q.Follow it returns nil at the end of the logs;
// with it, when ctx is done (returning ctx.Err()) or the gateway ends the
// stream. fn's first error ends it and is returned.
func (c *Client) Logs(ctx context.Context, project, kind, name string, q computeapi.StreamLogsParams, fn func(computeapi.LogLine) error) error {
	resp, err := c.API.StreamLogs(streaming(ctx), project, kind, name, &q, accept("application/x-ndjson"))
	if err != nil {
		return fmt.Errorf("logs of %s %s: %w", kind, name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return errorFromResponse(resp)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if t := strings.TrimSpace(string(line)); t != "" {
			var l computeapi.LogLine
			if jerr := json.Unmarshal([]byte(t), &l); jerr != nil {
				return fmt.Errorf("logs of %s %s: malformed line %q: %w", kind, name, truncate(t, 200), jerr)
			}
			if ferr := fn(l); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("logs of %s %s: %w", kind, name, err)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

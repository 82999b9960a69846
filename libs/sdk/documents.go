package sdk

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// Document is one workload document as a user wrote it, in JSON, with
// what locates it.
type Document struct {
	// JSON is the document as JSON, every field kept as written (the
	// gateway decodes strictly and names unknown fields).
	JSON []byte
	// Kind, Name and Project are the document's kind, metadata.name and
	// metadata.project (empty when absent).
	Kind, Name, Project string
}

// ParseDocument reads one workload document, in YAML or JSON.
func ParseDocument(doc []byte) (*Document, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("malformed document: %w", err)
	}
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name    string `json:"name"`
			Project string `json:"project"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return nil, fmt.Errorf("malformed document: want an object with kind, metadata and spec: %w", err)
	}
	d := &Document{JSON: j, Kind: head.Kind, Name: head.Metadata.Name, Project: head.Metadata.Project}
	var missing []string
	if d.Kind == "" {
		missing = append(missing, "kind")
	}
	if d.Name == "" {
		missing = append(missing, "metadata.name")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("document has no %s", strings.Join(missing, " and no "))
	}
	return d, nil
}

// project is the project the document goes to: its own, else def.
func (d *Document) project(def string) (string, error) {
	if d.Project != "" {
		return d.Project, nil
	}
	if def == "" {
		return "", fmt.Errorf("%s %s: no project: set metadata.project or pass one", d.Kind, d.Name)
	}
	return def, nil
}

// SplitDocuments splits a YAML stream on '---' lines, dropping documents
// that hold only comments or space. A JSON document is a YAML document.
func SplitDocuments(r io.Reader) ([][]byte, error) {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	flush := func() {
		if hasContent(cur.String()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for sc.Scan() {
		line := sc.Text()
		if t := strings.TrimRight(line, " \t\r"); t == "---" || strings.HasPrefix(t, "--- #") {
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line is longer than 16 MiB: %w", err)
		}
		return nil, err
	}
	flush()
	return docs, nil
}

func hasContent(s string) bool {
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

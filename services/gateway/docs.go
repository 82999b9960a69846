package gateway

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"atoll.dev/libs/computeapi"
)

func serveSpec(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(computeapi.SpecYAML)
}

// loadSpec parses the contract as written (the generated copy renames operations).
func loadSpec() (*openapi3.T, error) {
	return openapi3.NewLoader().LoadFromData(computeapi.SpecYAML)
}

func serveSpecJSON(w http.ResponseWriter, r *http.Request) {
	spec, err := loadSpec()
	if err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "the contract could not be loaded", err)
		return
	}
	writeJSON(w, http.StatusOK, spec)
}

// docsOperation is one operation on the docs page.
type docsOperation struct {
	Method, Path, ID, Summary string
	Description               string
	Params                    []docsParam
	Body                      string
	Responses                 []docsResponse
}

type docsParam struct{ Name, In, Type, Description string }

type docsResponse struct{ Code, Description, Schema string }

type docsSchema struct {
	Name, Description string
	Fields            []docsParam
}

var (
	docsOnce sync.Once
	docsHTML []byte
	docsErr  error
)

// serveDocs renders the contract as one HTML page, made once from the spec.
func serveDocs(w http.ResponseWriter, r *http.Request) {
	docsOnce.Do(func() { docsHTML, docsErr = renderDocs() })
	if docsErr != nil {
		writeError(w, r, http.StatusInternalServerError, "Internal", docsErr.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(docsHTML)
}

func schemaName(ref *openapi3.SchemaRef) string {
	if ref == nil {
		return ""
	}
	if ref.Ref != "" {
		return ref.Ref[strings.LastIndex(ref.Ref, "/")+1:]
	}
	if ref.Value == nil {
		return ""
	}
	t := strings.Join(ref.Value.Type.Slice(), "|")
	if t == "array" && ref.Value.Items != nil {
		return "[]" + schemaName(ref.Value.Items)
	}
	if len(ref.Value.Enum) > 0 {
		var vals []string
		for _, e := range ref.Value.Enum {
			b, _ := json.Marshal(e)
			vals = append(vals, string(b))
		}
		return t + " (" + strings.Join(vals, ", ") + ")"
	}
	return t
}

func renderDocs() ([]byte, error) {
	spec, err := loadSpec()
	if err != nil {
		return nil, err
	}
	var ops []docsOperation
	paths := spec.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, p := range paths {
		item := spec.Paths.Value(p)
		for method, op := range item.Operations() {
			d := docsOperation{Method: method, Path: p, ID: op.OperationID, Summary: op.Summary, Description: op.Description}
			for _, pr := range append(item.Parameters, op.Parameters...) {
				if pr.Value == nil {
					continue
				}
				d.Params = append(d.Params, docsParam{Name: pr.Value.Name, In: pr.Value.In, Type: schemaName(pr.Value.Schema), Description: pr.Value.Description})
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for ct, mt := range op.RequestBody.Value.Content {
					d.Body = ct + ": " + schemaName(mt.Schema)
				}
			}
			codes := make([]string, 0, op.Responses.Len())
			for code := range op.Responses.Map() {
				codes = append(codes, code)
			}
			sort.Strings(codes)
			for _, code := range codes {
				resp := op.Responses.Value(code)
				if resp == nil || resp.Value == nil {
					continue
				}
				dr := docsResponse{Code: code}
				if resp.Value.Description != nil {
					dr.Description = *resp.Value.Description
				}
				for ct, mt := range resp.Value.Content {
					if dr.Schema != "" {
						dr.Schema += "; "
					}
					dr.Schema += ct + ": " + schemaName(mt.Schema)
				}
				d.Responses = append(d.Responses, dr)
			}
			ops = append(ops, d)
		}
	}
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].Path != ops[j].Path {
			return ops[i].Path < ops[j].Path
		}
		return ops[i].Method < ops[j].Method
	})
	var schemas []docsSchema
	names := make([]string, 0, len(spec.Components.Schemas))
	for n := range spec.Components.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sc := spec.Components.Schemas[n].Value
		ds := docsSchema{Name: n, Description: sc.Description}
		props := make([]string, 0, len(sc.Properties))
		for p := range sc.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		for _, p := range props {
			pv := sc.Properties[p]
			desc := ""
			if pv.Value != nil {
				desc = pv.Value.Description
			}
			typ := schemaName(pv)
			for _, req := range sc.Required {
				if req == p {
					typ += ", required"
				}
			}
			ds.Fields = append(ds.Fields, docsParam{Name: p, Type: typ, Description: desc})
		}
		schemas = append(schemas, ds)
	}
	var buf bytes.Buffer
	err = docsTemplate.Execute(&buf, map[string]any{"Title": spec.Info.Title, "Version": spec.Info.Version, "Intro": spec.Info.Description, "Ops": ops, "Schemas": schemas})
	return buf.Bytes(), err
}

var docsTemplate = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} {{.Version}}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#1d2430}
h1{margin-bottom:0}code,pre{font-family:ui-monospace,monospace;font-size:13px}
.op{border:1px solid #d8dee8;border-radius:6px;margin:1rem 0;padding:.5rem 1rem}
.m{display:inline-block;min-width:4.5rem;font-weight:700}.GET{color:#0a6}.POST{color:#06c}.PUT{color:#a60}.PATCH{color:#a0a}.DELETE{color:#c22}
table{border-collapse:collapse;width:100%;margin:.3rem 0}td,th{border-top:1px solid #eef1f5;padding:.2rem .4rem;text-align:left;vertical-align:top}
pre.intro{white-space:pre-wrap;font-family:inherit;font-size:15px}
</style></head><body>
<h1>{{.Title}}</h1><p>Version {{.Version}} · <a href="/openapi.yaml">openapi.yaml</a> · <a href="/openapi.json">openapi.json</a> · <a href="/console/">console</a></p>
<pre class="intro">{{.Intro}}</pre>
<h2>Operations</h2>
{{range .Ops}}<div class="op" id="{{.ID}}"><div><span class="m {{.Method}}">{{.Method}}</span><code>{{.Path}}</code> — {{.Summary}}</div>
{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Params}}<table><tr><th>parameter</th><th>in</th><th>type</th><th></th></tr>{{range .Params}}<tr><td><code>{{.Name}}</code></td><td>{{.In}}</td><td>{{.Type}}</td><td>{{.Description}}</td></tr>{{end}}</table>{{end}}
{{if .Body}}<p>Body: <code>{{.Body}}</code></p>{{end}}
<table><tr><th>status</th><th></th><th>body</th></tr>{{range .Responses}}<tr><td>{{.Code}}</td><td>{{.Description}}</td><td><code>{{.Schema}}</code></td></tr>{{end}}</table></div>
{{end}}
<h2>Schemas</h2>
{{range .Schemas}}<div class="op" id="schema-{{.Name}}"><b>{{.Name}}</b>{{if .Description}} — {{.Description}}{{end}}
{{if .Fields}}<table>{{range .Fields}}<tr><td><code>{{.Name}}</code></td><td>{{.Type}}</td><td>{{.Description}}</td></tr>{{end}}</table>{{end}}</div>
{{end}}
</body></html>
`))

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// createCmd is `atoll create config|secret NAME`: a Config or a Secret
// from literals and files, without writing a document.
func createCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create (config|secret) NAME",
		Short: "Create a Config or a Secret from literals and files",
		Long: `create makes a Config or a Secret of the project from --from-literal KEY=VALUE
and --from-file [KEY=]PATH (KEY defaults to the file's name). A key is letters,
digits, '-', '_' and '.'; keys and values total at most 1 MiB. With
--overwrite, an existing one is replaced whole. get, describe and delete take
config and secret as any kind.`,
		Example: `  atoll create config web-conf --from-literal LOG_LEVEL=info --from-file nginx.conf
  atoll create secret web-db --from-literal DB_USER=web --from-file DB_PASSWORD=./password.txt
  atoll describe secret web-db`,
	}
	cmd.AddCommand(createConfigCmd(g, kindConfig), createConfigCmd(g, kindSecret))
	return cmd
}

func createConfigCmd(g *globals, kind string) *cobra.Command {
	var (
		literals, files, labels []string
		overwrite               bool
	)
	long := `config makes a Config: each --from-literal a variable (spec.data), each
--from-file a file (spec.files, its content as value). A workload names it
from its template (envFrom, env[].valueFrom, volumes[].config).`
	example := `  atoll create config web-conf --from-literal LOG_LEVEL=info --from-file nginx.conf
  atoll create config web-conf --from-file conf=./web.conf --overwrite`
	if kind == kindSecret {
		long = `secret makes a Secret: each --from-literal and --from-file a key of its data.
Its values are sealed before they are stored and no read returns them:
get and describe show its keys, version, digest, and who wrote them and
when. --overwrite writes new values (every key: the old ones are not read
back), the Secret's next version.`
		example = `  atoll create secret web-db --from-literal DB_USER=web --from-file DB_PASSWORD=./password.txt
  atoll create secret web-db --from-file DB_PASSWORD=./new-password.txt --overwrite`
	}
	cmd := &cobra.Command{
		Use:     strings.ToLower(kind) + " NAME",
		Short:   "Create a " + kind + " from literals and files",
		Long:    long,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := configDocument(kind, args[0], literals, files, labels)
			if err != nil {
				return err
			}
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				w, created, err := createOrReplace(ctx, c, project, doc, overwrite)
				if err != nil {
					return fmt.Errorf("create %s in project %s: %w", ref(kind, args[0]), project, err)
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, w)
				}
				verb := "replaced"
				if created {
					verb = "created"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s (project %s, generation %d)\n", ref(w.Kind, w.Metadata.Name), verb, w.Metadata.Project, w.Metadata.Generation)
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&literals, "from-literal", nil, "a key and its value, KEY=VALUE (repeatable)")
	f.StringArrayVar(&files, "from-file", nil, "a file's content as a key's value, [KEY=]PATH; KEY defaults to the file's name (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "a label, k=v (repeatable)")
	f.BoolVar(&overwrite, "overwrite", false, "replace it when it exists")
	return cmd
}

// configDocument builds the document of a Config or a Secret from the
// flags: a key given twice is an error.
func configDocument(kind, name string, literals, files, labels []string) (computeapi.WorkloadDocument, error) {
	data, fromFiles := map[string]string{}, map[string]string{}
	seen := map[string]string{}
	add := func(m map[string]string, key, value, from string) error {
		if prev, ok := seen[key]; ok {
			return fmt.Errorf("key %q given twice (%s and %s)", key, prev, from)
		}
		seen[key], m[key] = from, value
		return nil
	}
	for _, l := range literals {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return computeapi.WorkloadDocument{}, fmt.Errorf("--from-literal %q: want KEY=VALUE", l)
		}
		if err := add(data, k, v, "--from-literal "+k); err != nil {
			return computeapi.WorkloadDocument{}, err
		}
	}
	for _, spec := range files {
		k, path, ok := strings.Cut(spec, "=")
		if !ok {
			k, path = filepath.Base(spec), spec
		}
		if k == "" || path == "" {
			return computeapi.WorkloadDocument{}, fmt.Errorf("--from-file %q: want [KEY=]PATH", spec)
		}
		b, err := os.ReadFile(path) //nolint:gosec // G304: the file the user named with --from-file
		if err != nil {
			return computeapi.WorkloadDocument{}, fmt.Errorf("--from-file %s: %w", spec, err)
		}
		to := fromFiles
		if kind == kindSecret {
			to = data // a Secret's keys are all data
		}
		if err := add(to, k, string(b), "--from-file "+spec); err != nil {
			return computeapi.WorkloadDocument{}, err
		}
	}
	if len(seen) == 0 {
		return computeapi.WorkloadDocument{}, errors.New("no keys: give --from-literal or --from-file")
	}
	lab := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return computeapi.WorkloadDocument{}, fmt.Errorf("--label %q: want k=v", l)
		}
		lab[k] = v
	}
	if len(lab) == 0 {
		lab = nil
	}
	if kind == kindSecret {
		return sdk.NewSecret(name, lab, data)
	}
	spec := computeapi.ConfigSpec{}
	if len(data) > 0 {
		spec.Data = data
	}
	if len(fromFiles) > 0 {
		spec.Files = fromFiles
	}
	return sdk.NewConfig(name, lab, spec)
}

// createOrReplace creates the document's workload or, with overwrite,
// replaces the existing one.
func createOrReplace(ctx context.Context, c *sdk.Client, project string, doc computeapi.WorkloadDocument, overwrite bool) (*computeapi.Workload, bool, error) {
	w, err := c.CreateWorkload(ctx, project, doc, "")
	var e *sdk.Error
	if !overwrite || !errors.As(err, &e) || e.Status != http.StatusConflict || e.Body.Code != "AlreadyExists" {
		return w, err == nil, err
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, false, err
	}
	w, err = c.UpdateWorkloadJSON(ctx, project, string(doc.Kind), doc.Metadata.Name, body)
	return w, false, err
}

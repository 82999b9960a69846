package bus

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Each endpoint of the contract has its own subject, is served by one
// service and called by users that exist, and Grants gives its subject to
// exactly the service that serves it and the callers it names.
func TestContractGrants(t *testing.T) {
	grants := Grants()
	seen := map[string]bool{}
	for _, d := range Contract() {
		rt := d.route()
		subject := d.Subject()
		if seen[subject] {
			t.Errorf("%s: two endpoints have this subject", subject)
		}
		seen[subject] = true
		if rt.verb == "" || strings.ContainsAny(rt.verb, ".*> ") {
			t.Errorf("%s: verb %q is not one subject token", subject, rt.verb)
		}
		if _, ok := grants[rt.service]; !ok {
			t.Errorf("%s: served by %q, which is no service's user", subject, rt.service)
		}
		if len(rt.callers) == 0 {
			t.Errorf("%s: no callers", subject)
		}
		for _, u := range rt.callers {
			if !slices.Contains(Users(), u) {
				t.Errorf("%s: caller %q is no user", subject, u)
			}
		}
		for user, g := range grants {
			p := g.Permission(user)
			if got, want := slices.Contains(p.Subscribe, subject), user == rt.service; got != want {
				t.Errorf("%s: %s may subscribe: %v, want %v", subject, user, got, want)
			}
			if got, want := slices.Contains(p.Publish, subject), slices.Contains(rt.callers, user); got != want {
				t.Errorf("%s: %s may publish: %v, want %v", subject, user, got, want)
			}
			if user == rt.service && !p.Responses {
				t.Errorf("%s: %s may not answer", subject, user)
			}
		}
	}
}

// No verb of the contract is written outside contract.go: no endpoint's
// subject is made from strings (RequestSubject) outside this package, no
// call passes an endpoint's service and verb as literals, and no constant
// or variable other than the descriptors holds a verb (VerbSubmit =
// "submit", remediationStatus = "status"). Test files may address
// endpoints of their own.
func TestVerbsOnlyInTheContract(t *testing.T) {
	root := workspaceRoot(t)
	type pair struct{ service, verb string }
	endpoints := map[pair]bool{}
	verbs := map[string][]string{} // verb -> services
	for _, d := range Contract() {
		rt := d.route()
		endpoints[pair{rt.service, rt.verb}] = true
		verbs[rt.verb] = append(verbs[rt.verb], rt.service)
	}
	var found []string
	fset := token.NewFileSet()
	for _, dir := range []string{"libs", "services"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if n := e.Name(); n == "node_modules" || n == "testdata" || strings.HasPrefix(n, ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			if rel == filepath.Join("libs", "bus", "contract.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			inBus := filepath.Dir(rel) == filepath.Join("libs", "bus")
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if name := calleeName(n.Fun); name == "RequestSubject" && !inBus {
						found = append(found, fset.Position(n.Pos()).String()+": RequestSubject: use the endpoint's descriptor")
					}
					var lits []string
					for _, a := range n.Args {
						if s, ok := stringLit(a); ok {
							lits = append(lits, s)
						}
					}
					for _, s := range lits {
						for _, v := range lits {
							if endpoints[pair{s, v}] {
								found = append(found, fset.Position(n.Pos()).String()+": "+s+" "+v+" as literals")
							}
						}
					}
				case *ast.ValueSpec:
					for i, v := range n.Values {
						s, ok := stringLit(v)
						if !ok || i >= len(n.Names) || verbs[s] == nil {
							continue
						}
						name := strings.ToLower(n.Names[i].Name)
						holds := strings.Contains(name, "verb")
						for _, svc := range verbs[s] {
							holds = holds || strings.Contains(name, svc)
						}
						if holds {
							found = append(found, fset.Position(n.Pos()).String()+": "+n.Names[i].Name+" = "+strconv.Quote(s))
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range found {
		t.Error(f)
	}
}

// workspaceRoot is the folder of go.work above the test's directory.
func workspaceRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// calleeName is the name of the function or method a call calls.
func calleeName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.IndexExpr:
		return calleeName(f.X)
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

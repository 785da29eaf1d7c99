package testwait

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A test's deadline starts once the test runs: made inside a (sub)test after its t.Parallel(),
// never by a parent for parallel subtests, nor before the t.Parallel() of the test that uses
// it. A parallel subtest waits for its turn after its parent returned, and on two busy cores
// that can be longer than the deadline: the subtest then fails at once, "context deadline
// exceeded", having done nothing. Every test file of the module is read for the two shapes.
func TestNoTestTakesADeadlineMadeBeforeItsTurn(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root is not two directories up: %v", err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		files++
		for _, found := range deadlinesBeforeTheirTurn(f, src, fset) {
			rel, _ := filepath.Rel(root, found.at.Filename)
			t.Errorf("%s:%d: %s", rel, found.at.Line, found.what)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d test files; the module has more: the walk is broken", files)
	}
}

// The two shapes the rule finds, in a file made to have both, and a subtest that makes its
// own deadline, which it must not find.
func TestTheDeadlineRuleFindsBothShapes(t *testing.T) {
	t.Parallel()
	src := []byte(`package p

func TestParent(t *testing.T) {
	ctx := testContext(t)
	t.Run("a", func(t *testing.T) {
		t.Parallel()
		use(ctx)
	})
	t.Run("b", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		use(ctx)
	})
}

func TestBefore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Parallel()
	use(ctx)
}
`)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, found := range deadlinesBeforeTheirTurn(f, src, fset) {
		lines = append(lines, found.at.Line)
	}
	if len(lines) != 2 || lines[0] != 7 || lines[1] != 18 {
		t.Errorf("found the shapes at lines %v, want 7 (a parallel subtest using its parent's) and 18 (made before t.Parallel)", lines)
	}
}

type finding struct {
	at   token.Position
	what string
}

// deadlinesBeforeTheirTurn finds in f a parallel function literal (a subtest) that uses a
// context its enclosing function made, and a context made before a t.Parallel() in the same
// block. A context here is a variable whose declaration calls context.WithTimeout or
// WithDeadline, or a helper named …Context (the packages' testContext).
func deadlinesBeforeTheirTurn(f *ast.File, src []byte, fset *token.FileSet) []finding {
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	makesDeadline := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name := ""
			switch fun := call.Fun.(type) {
			case *ast.Ident:
				name = fun.Name
			case *ast.SelectorExpr:
				name = fun.Sel.Name
				if x, ok := fun.X.(*ast.Ident); ok && x.Name == "context" {
					found = found || strings.HasPrefix(name, "WithTimeout") || strings.HasPrefix(name, "WithDeadline")
					return true
				}
			}
			found = found || strings.HasSuffix(name, "Context") && name != "Context"
			return true
		})
		return found
	}
	var out []finding
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			if parallelAt(n.Body.List) < 0 {
				return true
			}
			seen := map[*ast.Object]bool{}
			ast.Inspect(n.Body, func(m ast.Node) bool {
				id, ok := m.(*ast.Ident)
				if !ok || id.Obj == nil || id.Obj.Kind != ast.Var || seen[id.Obj] {
					return true
				}
				decl, ok := id.Obj.Decl.(ast.Node)
				if !ok || decl.Pos() >= n.Pos() && decl.Pos() < n.End() {
					return true
				}
				seen[id.Obj] = true
				if makesDeadline(decl) {
					out = append(out, finding{fset.Position(id.Pos()), "a parallel subtest uses " + id.Name +
						", a deadline its parent made (" + text(decl) + "): make it inside the subtest, after t.Parallel()"})
				}
				return true
			})
		case *ast.BlockStmt:
			for _, s := range n.List[:max(parallelAt(n.List), 0)] {
				if makesDeadline(s) {
					out = append(out, finding{fset.Position(s.Pos()), "a deadline made before t.Parallel() (" + text(s) +
						"): make it after, once the test runs"})
				}
			}
		}
		return true
	})
	return out
}

// parallelAt is the index of the statement of list that calls Parallel(), or -1.
func parallelAt(list []ast.Stmt) int {
	for i, s := range list {
		if e, ok := s.(*ast.ExprStmt); ok {
			if call, ok := e.X.(*ast.CallExpr); ok && len(call.Args) == 0 {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" {
					return i
				}
			}
		}
	}
	return -1
}

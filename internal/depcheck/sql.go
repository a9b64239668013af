package depcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SQLWall is a wall on where SQL is written, checked on the source rather
// than on the imports: the production files (go list's GoFiles and
// CgoFiles, tests left out) of the packages From selects may not call a
// method that runs a statement (Calls) nor hold a string literal that
// Literal accepts. A literal is read whole: the operands of a chain of +
// are joined, a non-literal operand as one word, so that
// "SELECT " + columns + " FROM nodes" reads as the statement it builds.
type SQLWall struct {
	// Name says the wall in words, as a report shows it.
	Name string
	// From selects the repository packages the wall holds for.
	From func(path string) bool
	// Calls are the method names a package may not call: a call of
	// x.Name(...) with at least one argument (url.Values' Query() takes
	// none and runs nothing).
	Calls []string
	// Literal reports whether a string literal is SQL the wall forbids;
	// nil forbids none.
	Literal func(s string) bool
	// Exceptions are the packages (relative to the repository, each with
	// the whole folder under it) the wall does not hold for, each with its
	// reason. An exception that no longer excuses anything is reported,
	// so that it is removed with what it excused.
	Exceptions []SQLException
}

// SQLException is one written exception to an SQL wall.
type SQLException struct {
	Dir    string
	Reason string
}

// SQLViolation is SQL where a wall forbids it: the package, the place and
// what is there.
type SQLViolation struct {
	Wall    string
	Package string
	Pos     string // file:line, the file relative to the package's folder
	What    string
}

// String reads "wall: package file.go:12: what".
func (v SQLViolation) String() string {
	return fmt.Sprintf("%s: %s %s: %s", v.Wall, v.Package, v.Pos, v.What)
}

// sqlStart is a literal that reads as a statement: it starts (after
// whitespace) with SELECT, INSERT, UPDATE, DELETE or WITH in either case,
// in a statement's shape, so that a help text such as "Delete a node" or
// "with --wait, ..." is not one.
var sqlStart = regexp.MustCompile(`(?is)^\s*(` +
	`SELECT\s.*\bFROM\s|SELECT\s+([0-9$'(*]|\w+\s*\()|` +
	`INSERT\s+INTO\s|` +
	`UPDATE\s+[\w.]+(\s+(AS\s+)?\w+)?\s+SET\s|` +
	`DELETE\s+FROM\s|` +
	`WITH\s+(RECURSIVE\s+)?\w+(\s*\([^)]*\))?\s+AS\s+(NOT\s+)?(MATERIALIZED\s+)?\()`)

// ReadsAsSQL reports whether s reads as an SQL statement.
func ReadsAsSQL(s string) bool {
	m := sqlStart.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	// "Select the nodes from a pool" is prose: SQL's keyword is written in
	// one case.
	kw := strings.Fields(m[1])[0]
	return kw == strings.ToUpper(kw) || kw == strings.ToLower(kw)
}

// namesCommands is SQL that names the commands table as the one it reads
// or writes.
var namesCommands = regexp.MustCompile(`(?i)\b(from|join|update|into)\s+commands\b`)

// NamesCommandsTable reports whether s names the commands table as SQL does.
func NamesCommandsTable(s string) bool { return namesCommands.MatchString(s) }

// frontDoors are the control plane's ways in (docs/architecture.md).
var frontDoors = []string{"controlplane/front", "controlplane/console"}

// SQLWalls are the repository's walls on where SQL is written.
var SQLWalls = []SQLWall{
	{
		// A front door holds a transaction (pgtx) and calls the room of
		// each noun for the statements; it writes none.
		Name: "the front doors (controlplane/front, controlplane/console) never write SQL",
		From: func(p string) bool {
			return slices.ContainsFunc(frontDoors, func(d string) bool { return under(p, d) })
		},
		Calls:   []string{"Exec", "Query", "QueryRow", "SendBatch", "CopyFrom", "Prepare"},
		Literal: ReadsAsSQL,
	},
	{
		Name:    "only the command queue's room (controlplane/commands) holds SQL naming the commands table",
		From:    func(p string) bool { return !under(p, "controlplane/commands") },
		Literal: NamesCommandsTable,
		Exceptions: []SQLException{
			{Dir: "controlplane/testing/sim", Reason: "the simulator is a test double: it counts its own workload's commands straight from the table to check what it measured, and only bc-sim links it"},
			{Dir: "controlplane/fleet/nodehealth", Reason: "its settle hook copies a settled diag.nvml's failed checks onto the node's row in one statement, in the settle's transaction: the statement writes nodes (the fleet's) and reads the shape of diag.nvml's result (checks, status fail), which is the health rule's knowledge, not the queue's"},
		},
	},
}

// CheckSQL returns every place that breaks an SQL wall, and every written
// exception that excuses nothing, in a stable order. A file that does not
// parse is an error.
func CheckSQL(g *Graph, walls []SQLWall) ([]SQLViolation, error) {
	var out []SQLViolation
	for _, w := range walls {
		excused := map[string]bool{}
		for _, root := range g.roots() {
			if !w.From(root) {
				continue
			}
			vs, err := g.sqlIn(root, w)
			if err != nil {
				return nil, err
			}
			if i := slices.IndexFunc(w.Exceptions, func(e SQLException) bool { return under(root, e.Dir) }); i >= 0 {
				if len(vs) > 0 {
					excused[w.Exceptions[i].Dir] = true
				}
				continue
			}
			out = append(out, vs...)
		}
		for _, e := range w.Exceptions {
			if !excused[e.Dir] {
				out = append(out, SQLViolation{Wall: w.Name, Package: Module + "/" + e.Dir, Pos: "-",
					What: "the written exception excuses nothing now: remove it (" + e.Reason + ")"})
			}
		}
	}
	return out, nil
}

// sqlIn returns what breaks w in the package's production files.
func (g *Graph) sqlIn(path string, w SQLWall) ([]SQLViolation, error) {
	p := g.pkgs[path]
	files := append(append([]string(nil), p.GoFiles...), p.CgoFiles...)
	sort.Strings(files)
	var out []SQLViolation
	for _, name := range files {
		file := filepath.Join(p.Dir, name)
		read := file
		if r, ok := g.replace[filepath.Clean(file)]; ok {
			if r == "" {
				continue // the overlay deletes it
			}
			read = r
		}
		src, err := os.ReadFile(read)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", file, err)
		}
		report := func(pos token.Pos, what string) {
			out = append(out, SQLViolation{Wall: w.Name, Package: path,
				Pos: fmt.Sprintf("%s:%d", name, fset.Position(pos).Line), What: what})
		}
		var visit func(ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) > 0 && slices.Contains(w.Calls, sel.Sel.Name) {
					report(n.Pos(), "calls "+sel.Sel.Name)
				}
			case *ast.BinaryExpr:
				if n.Op != token.ADD || w.Literal == nil {
					return true
				}
				s, rest, ok := joinLiterals(n)
				if !ok {
					return true // not a string chain
				}
				if w.Literal(s) {
					report(n.Pos(), "holds SQL "+quoteShort(s))
				}
				for _, r := range rest {
					ast.Inspect(r, visit)
				}
				return false
			case *ast.BasicLit:
				return inspectLiteral(n, w, report)
			}
			return true
		}
		ast.Inspect(f, visit)
	}
	return out, nil
}

// inspectLiteral reports a lone string literal the wall forbids; for a
// node that is not one, it tells ast.Inspect to go on.
func inspectLiteral(n ast.Node, w SQLWall, report func(token.Pos, string)) bool {
	lit, ok := n.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING || w.Literal == nil {
		return true
	}
	if s, err := strconv.Unquote(lit.Value); err == nil && w.Literal(s) {
		report(lit.Pos(), "holds SQL "+quoteShort(s))
	}
	return false
}

// joinLiterals reads a chain of + whose operands include a string literal
// as the string it builds, each other operand as the word "x"; rest are
// those other operands, to be inspected on their own. ok is false for a
// chain without a string literal (a sum of numbers).
func joinLiterals(e ast.Expr) (s string, rest []ast.Expr, ok bool) {
	var b strings.Builder
	var walk func(ast.Expr)
	walk = func(e ast.Expr) {
		switch x := e.(type) {
		case *ast.ParenExpr:
			walk(x.X)
			return
		case *ast.BinaryExpr:
			if x.Op == token.ADD {
				walk(x.X)
				walk(x.Y)
				return
			}
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				if v, err := strconv.Unquote(x.Value); err == nil {
					b.WriteString(v)
					ok = true
					return
				}
			}
		}
		b.WriteString(" x ")
		rest = append(rest, e)
	}
	walk(e)
	return b.String(), rest, ok
}

// quoteShort quotes the start of s, its whitespace folded, for a report.
func quoteShort(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return strconv.Quote(s)
}

package testutil

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// ConfigKeys lists the keys of a config struct type as dotted paths, read
// from each field's tag (json for bcd, yaml for bc-server): a nested
// struct's keys are under its own, except for the paths named in whole,
// which are one key each (sections documented elsewhere as a whole). Tests
// hold the docs' configuration tables to it.
func ConfigKeys(t reflect.Type, tag string, whole ...string) []string {
	return configKeys(t, tag, "", whole)
}

func configKeys(t reflect.Type, tag, prefix string, whole []string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		isWhole := false
		for _, w := range whole {
			isWhole = isWhole || w == path
		}
		if !isWhole && ft.Kind() == reflect.Struct && ft.NumField() > 0 && ft.Field(0).Tag.Get(tag) != "" {
			out = append(out, configKeys(ft, tag, path+".", whole)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// MarkdownTable returns the rows (the lines that start with "|") of the
// first table after marker in the markdown file, header and rule included.
func MarkdownTable(t testing.TB, file, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	doc := string(b)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s has no %q", file, marker)
	}
	var rows []string
	for _, l := range strings.Split(doc[i+len(marker):], "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		} else if len(rows) > 0 {
			break
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table after %q", file, marker)
	}
	return rows
}

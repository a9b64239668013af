package testutil

import (
	"reflect"
	"strings"
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

package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// BuildRequest builds a request message of type md from key=value pairs:
// keys are the fields' JSON names (tenantId) or proto names (tenant_id); a
// dotted key (payload.rescan=true) reaches into a message or Struct field; a
// value that parses as JSON is JSON, except for a string field, which takes
// the text as it is (so nodeId=123 stays a string); a repeated field takes a
// JSON array, or one element per pair. An unknown field gets an error that
// lists the valid ones.
func BuildRequest(md protoreflect.MessageDescriptor, pairs []string) (proto.Message, error) {
	obj := map[string]any{}
	for _, pair := range pairs {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("argument %q: expected key=value (fields of %s: %s)", pair, md.Name(), strings.Join(fieldNames(md), ", "))
		}
		path := strings.Split(key, ".")
		fd := findField(md, path[0])
		if fd == nil {
			return nil, fmt.Errorf("unknown field %q for %s; valid fields: %s", path[0], md.Name(), strings.Join(fieldNames(md), ", "))
		}
		name := fd.JSONName()
		if len(path) > 1 {
			if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
				return nil, fmt.Errorf("field %q is not a message: %q cannot reach into it", name, key)
			}
			sub, _ := obj[name].(map[string]any)
			if sub == nil {
				if _, set := obj[name]; set {
					return nil, fmt.Errorf("field %q is set twice", name)
				}
				sub = map[string]any{}
				obj[name] = sub
			}
			setPath(sub, path[1:], jsonValue(value))
			continue
		}
		v := fieldValue(fd, value)
		if fd.IsList() {
			prev, _ := obj[name].([]any)
			switch x := v.(type) {
			case []any:
				obj[name] = append(prev, x...)
			default:
				obj[name] = append(prev, x)
			}
			continue
		}
		if _, set := obj[name]; set {
			return nil, fmt.Errorf("field %q is set twice", name)
		}
		obj[name] = v
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	mt, err := messageType(md)
	if err != nil {
		return nil, err
	}
	msg := mt.New().Interface()
	if err := protojson.Unmarshal(b, msg); err != nil {
		return nil, fmt.Errorf("building %s: %w", md.Name(), err)
	}
	return msg, nil
}

func findField(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByJSONName(key); fd != nil {
		return fd
	}
	return md.Fields().ByName(protoreflect.Name(key))
}

// fieldValue converts the text of a top-level field's value.
func fieldValue(fd protoreflect.FieldDescriptor, value string) any {
	if fd.Kind() == protoreflect.StringKind {
		if fd.IsList() {
			var arr []any
			if json.Unmarshal([]byte(value), &arr) == nil {
				return arr
			}
		}
		return value
	}
	v := jsonValue(value)
	if fd.IsList() {
		if arr, ok := v.([]any); ok {
			return arr
		}
	}
	return v
}

// jsonValue is the JSON value value parses as, or value as a string.
func jsonValue(value string) any {
	var v any
	if json.Unmarshal([]byte(value), &v) == nil {
		return v
	}
	return value
}

func setPath(obj map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, _ := obj[p].(map[string]any)
		if next == nil {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = v
}

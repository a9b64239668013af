// Package cli is the better-compute command line: `api` calls any method of
// the public API by its spec name (commands.run), mapped onto the gRPC
// services by reflection over the compiled-in proto descriptors, and the
// `commands` group wraps the common calls in readable tables, --wait and a
// resumable watch.
package cli

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// apiPackage is the proto package whose services the CLI exposes: every
// file of it (api.proto, pools.proto, ...). Referencing the generated Go
// package registers its files in protoregistry.GlobalFiles.
var apiPackage = apiv1.File_bc_api_v1_api_proto.Package()

// apiServices lists the services of every file of apiPackage.
func apiServices() []protoreflect.ServiceDescriptor {
	var out []protoreflect.ServiceDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(f protoreflect.FileDescriptor) bool {
		svcs := f.Services()
		for i := 0; i < svcs.Len(); i++ {
			out = append(out, svcs.Get(i))
		}
		return true
	})
	return out
}

// Method is one API method as the CLI names it.
type Method struct {
	// Name is the spec's name: lower-camel service, ".", lower-camel method
	// ("commands.run", "nodes.createTenant").
	Name string
	// FullMethod is the gRPC path ("/bc.api.v1.Commands/Run").
	FullMethod string
	// Desc is the method's descriptor.
	Desc protoreflect.MethodDescriptor
}

// lowerCamel lower-cases the first letter: "CreateTenant" -> "createTenant".
func lowerCamel(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// Methods lists every method of the API, sorted by name.
func Methods() []Method {
	var out []Method
	for _, svc := range apiServices() {
		ms := svc.Methods()
		for j := 0; j < ms.Len(); j++ {
			m := ms.Get(j)
			out = append(out, Method{
				Name:       lowerCamel(string(svc.Name())) + "." + lowerCamel(string(m.Name())),
				FullMethod: "/" + string(svc.FullName()) + "/" + string(m.Name()),
				Desc:       m,
			})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// FindMethod resolves a spec name such as "commands.run". The match is
// case-insensitive so that "Commands.Run" works too; an unknown name gets an
// error that lists the valid ones.
func FindMethod(name string) (Method, error) {
	all := Methods()
	for _, m := range all {
		if strings.EqualFold(m.Name, name) {
			return m, nil
		}
	}
	names := make([]string, len(all))
	for i, m := range all {
		names[i] = m.Name
	}
	return Method{}, fmt.Errorf("unknown method %q; valid methods: %s", name, strings.Join(names, ", "))
}

// messageType returns the generated Go type of a message descriptor, so that
// requests and responses are real generated messages, not dynamic ones.
func messageType(md protoreflect.MessageDescriptor) (protoreflect.MessageType, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil, fmt.Errorf("message type %s: %w", md.FullName(), err)
	}
	return mt, nil
}

// fieldNames lists a message's fields by their JSON names.
func fieldNames(md protoreflect.MessageDescriptor) []string {
	fs := md.Fields()
	out := make([]string, fs.Len())
	for i := 0; i < fs.Len(); i++ {
		out[i] = fs.Get(i).JSONName()
	}
	return out
}

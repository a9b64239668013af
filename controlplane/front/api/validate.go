package api

import (
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/internal/names"
)

// Every name a request carries is checked before it reaches the database:
// one grammar (internal/names) for ids, roles and kinds, the same that the
// join service and bcd's config hold them to, and each refusal is
// INVALID_INPUT naming its field. Without this PostgreSQL was the check: a
// NUL byte became INTERNAL, and a node id no certificate can carry was
// stored and could never join.

// invalid is INVALID_INPUT naming field.
func invalid(field, message string) error {
	return apierr.New(errcode.InvalidInput, message, map[string]string{"field": field})
}

// validID checks a required id.
func validID(field, value string) error { return auth.CheckID(field, value) }

// validOptionalID checks an id that may be left empty.
func validOptionalID(field, value string) error {
	if value == "" {
		return nil
	}
	return validID(field, value)
}

// validRole checks a role that may be left empty (the server's default).
func validRole(field, role string) error {
	if role == "" {
		return nil
	}
	if err := names.Role(role); err != nil {
		return invalid(field, strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": "))
	}
	return nil
}

// validKinds checks a list of kind names.
func validKinds(field string, kinds []string) error {
	for i, k := range kinds {
		if err := names.Kind(k); err != nil {
			return invalid(field+"["+strconv.Itoa(i)+"]", strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": "))
		}
	}
	return nil
}

// MaxTenantNameLen bounds a tenant's display name.
const MaxTenantNameLen = 200

// validName checks a display name: at most MaxTenantNameLen bytes, no
// control characters (a NUL byte is not text to PostgreSQL).
func validName(field, name string) error {
	if len(name) > MaxTenantNameLen {
		return invalid(field, field+" is "+strconv.Itoa(len(name))+" bytes long; at most "+strconv.Itoa(MaxTenantNameLen))
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return invalid(field, field+" must not hold control characters")
	}
	return nil
}

// validJSONText checks that no string in v, key or value, holds a NUL
// byte: JSON allows \u0000, PostgreSQL's jsonb does not.
func validJSONText(field string, v *structpb.Struct) error {
	if path, bad := nulIn(structpb.NewStructValue(v), field); bad {
		return apierr.New(errcode.InvalidInput, path+" holds a NUL character, which the control plane cannot store",
			map[string]string{"field": field, "path": path})
	}
	return nil
}

// nulIn finds the first string with a NUL in v and returns its path.
func nulIn(v *structpb.Value, path string) (string, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return path, strings.IndexByte(k.StringValue, 0) >= 0
	case *structpb.Value_StructValue:
		for key, fv := range k.StructValue.GetFields() {
			if strings.IndexByte(key, 0) >= 0 {
				return path + "." + strconv.Quote(key), true
			}
			if p, bad := nulIn(fv, path+"."+key); bad {
				return p, true
			}
		}
	case *structpb.Value_ListValue:
		for i, ev := range k.ListValue.GetValues() {
			if p, bad := nulIn(ev, path+"["+strconv.Itoa(i)+"]"); bad {
				return p, true
			}
		}
	}
	return "", false
}

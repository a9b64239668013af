package kind

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ErrInvalidPayload is wrapped by every payload refusal.
var ErrInvalidPayload = errors.New("invalid payload")

// PayloadError names the field of a payload that failed its schema.
type PayloadError struct {
	// Field is the JSON pointer of the failing value ("/sections/0"), "" for the root.
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error reads "payload field /sections/0: value must be one of ...".
func (e *PayloadError) Error() string {
	field := e.Field
	if field == "" {
		field = "(root)"
	}
	return fmt.Sprintf("payload field %s: %s", field, e.Problem)
}

// Unwrap lets errors.Is(err, ErrInvalidPayload) hold.
func (e *PayloadError) Unwrap() error { return ErrInvalidPayload }

// Validator checks payloads against a compiled manifest schema.
type Validator struct {
	schema *jsonschema.Schema
}

// NewValidator compiles m's payload schema.
func NewValidator(m Manifest) (*Validator, error) {
	s, err := m.CompileSchema()
	if err != nil {
		return nil, fmt.Errorf("kind %s: %w", m.Kind, err)
	}
	return &Validator{schema: s}, nil
}

// Validate checks payload; an empty payload is read as {}. The error is a
// *PayloadError that names the first failing field.
func (v *Validator) Validate(payload []byte) error {
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = []byte("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &PayloadError{Problem: "not valid JSON: " + err.Error()}
	}
	if err := v.schema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return leafError(ve)
		}
		return &PayloadError{Problem: err.Error()}
	}
	return nil
}

// leafError picks the deepest, first-sorted cause: the one that names a field.
func leafError(ve *jsonschema.ValidationError) *PayloadError {
	leaves := collectLeaves(ve, nil)
	sort.SliceStable(leaves, func(i, j int) bool {
		return len(leaves[i].InstanceLocation) > len(leaves[j].InstanceLocation)
	})
	leaf := leaves[0]
	field := ""
	if len(leaf.InstanceLocation) > 0 {
		field = "/" + strings.Join(leaf.InstanceLocation, "/")
	}
	problem := leaf.ErrorKind.LocalizedString(englishPrinter)
	return &PayloadError{Field: field, Problem: problem}
}

func collectLeaves(ve *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return append(out, ve)
	}
	for _, c := range ve.Causes {
		out = collectLeaves(c, out)
	}
	return out
}

// DecodePayload validates nothing; it unmarshals a payload into v, reading an
// empty payload as {}. Handlers call it after the SDK has checked the schema.
func DecodePayload(payload []byte, v any) error {
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = []byte("{}")
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPayload, err)
	}
	return nil
}

var englishPrinter = message.NewPrinter(language.English)

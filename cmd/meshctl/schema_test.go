package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// What an editor does with `meshctl schema`'s output: compile it with a JSON Schema validator
// of its own, check the shipped examples against it, and flag a key the operator misspelt.
func TestSchemaChecksExamplesAndFlagsAMisspeltKey(t *testing.T) {
	code, stdout, stderr := meshctl(t, "schema")
	if code != exitOK {
		t.Fatalf("meshctl schema: exit %d: %s", code, stderr)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(stdout))
	if err != nil {
		t.Fatalf("meshctl schema printed no JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mesh.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("mesh.schema.json")
	if err != nil {
		t.Fatalf("meshctl schema printed a schema that does not compile: %v", err)
	}
	check := func(data []byte) error {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return err
		}
		return schema.Validate(inst)
	}
	files, err := filepath.Glob("../../examples/*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(data); err != nil {
			t.Errorf("the schema refuses the example %s: %v", f, err)
		}
	}

	data, err := os.ReadFile("../../examples/seed/modules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typo := bytes.Replace(data, []byte("    claims:"), []byte("    claim:"), 1)
	if bytes.Equal(typo, data) {
		t.Fatal("examples/seed/modules.yaml has no `claims:` to misspell")
	}
	var verr *jsonschema.ValidationError
	if err := check(typo); !errors.As(err, &verr) || !strings.Contains(err.Error(), "'claim'") {
		t.Errorf("`claim:` for `claims:`: the schema says %v, want a refusal naming 'claim'", err)
	}
}

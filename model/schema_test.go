package model_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/meshbus/meshctl/model"
)

// The schema is checked with an independent implementation of JSON Schema, the one editors'
// validators follow, rather than with meshctl's own reading of it: a schema only the loader's
// authors could read would prove nothing about what an editor shows.

// compileSchema compiles schema (a JSON Schema document) as an editor's validator would.
func compileSchema(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mesh.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mesh.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// validateYAML checks every document of a YAML file against s, as the YAML language server does:
// each document converted to JSON's values and validated on its own. It returns the first
// document's refusal, or an error when the file cannot be read as YAML's plain values at all.
func validateYAML(s *jsonschema.Schema, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if err := s.Validate(v); err != nil {
			return err
		}
	}
}

// descriptionFiles lists the *.yaml and *.yml files of a description directory.
func descriptionFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Type().IsRegular() && model.IsDescriptionFile(d.Name()) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The schema editors read is the one meshctl writes now: docs/mesh.schema.json is
// `meshctl schema`'s output, rewritten with -update.
func TestSchemaFileIsCurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "docs", "mesh.schema.json")
	if *update {
		if err := os.WriteFile(path, model.Schema(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model.Schema()) {
		t.Errorf("%s is not what meshctl schema prints: run go test ./model -run TestSchemaFileIsCurrent -update", path)
	}
}

// schemaComment is the yaml-language-server's own comment naming a file's schema.
var schemaComment = regexp.MustCompile(`(?m)^# yaml-language-server: \$schema=(\S+)$`)

// Every example carries the editor's schema comment, naming the schema meshctl writes, and
// every example and every golden valid case passes it: the schema never flags a description
// meshctl accepts.
func TestSchemaAcceptsEveryValidDescription(t *testing.T) {
	t.Parallel()
	s := compileSchema(t, model.Schema())
	examples, err := filepath.Glob(filepath.Join("..", "examples", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, dir := range examples {
		if filepath.Base(dir) == "ci" {
			continue // a CI workflow, not a description
		}
		for _, file := range descriptionFiles(t, dir) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := schemaComment.FindSubmatch(data)
			if m == nil {
				t.Errorf("%s has no `# yaml-language-server: $schema=…` comment for editors", file)
			} else if named, err := os.ReadFile(filepath.Join(filepath.Dir(file), string(m[1]))); err != nil {
				t.Errorf("%s names the schema %s: %v", file, m[1], err)
			} else if !bytes.Equal(named, model.Schema()) {
				t.Errorf("%s names the schema %s, which is not what meshctl schema prints", file, m[1])
			}
			if err := validateYAML(s, data); err != nil {
				t.Errorf("the schema refuses the example %s: %v", file, err)
			}
			checked++
		}
	}
	cases, err := filepath.Glob(filepath.Join("testdata", "valid-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range cases {
		for _, file := range descriptionFiles(t, dir) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateYAML(s, data); err != nil {
				t.Errorf("the schema refuses the golden valid case %s: %v", file, err)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d files: the examples or golden cases moved", checked)
	}
}

// structural picks out the loader's diagnostics about a description's shape: a key no section
// has, a value of the wrong kind, a required key missing. These are what the schema says too,
// so a golden case refused for one of them must be refused by the schema; the other refusals
// (names' rules, references, addresses) are the loader's alone. So is refusing a YAML alias: an
// editor validates the value the alias stands for.
var structural = regexp.MustCompile("unknown key |must be a (mapping|list|string|whole number)|must be true or false|needs a |has no `on`")

var alias = regexp.MustCompile("an alias")

// Every golden invalid case of the structural kind fails the schema, which is what an editor
// shows before meshctl validate is ever run.
func TestSchemaRefusesStructuralProblems(t *testing.T) {
	t.Parallel()
	s := compileSchema(t, model.Schema())
	cases, err := filepath.Glob(filepath.Join("testdata", "invalid-*"))
	if err != nil {
		t.Fatal(err)
	}
	var refused int
	for _, dir := range cases {
		_, err := model.Load(dir)
		var lerr *model.LoadError
		if !errors.As(err, &lerr) {
			continue // TestGolden says what is wrong with it
		}
		var shape []string
		for _, d := range lerr.Diagnostics {
			if structural.MatchString(d.Message) && !alias.MatchString(d.Message) {
				shape = append(shape, d.String())
			}
		}
		if len(shape) == 0 {
			continue
		}
		var schemaErrs []string
		for _, file := range descriptionFiles(t, dir) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateYAML(s, data); err != nil {
				schemaErrs = append(schemaErrs, err.Error())
			}
		}
		if len(schemaErrs) == 0 {
			t.Errorf("the schema accepts %s, which the loader refuses for its shape:\n%s", dir, strings.Join(shape, "\n"))
			continue
		}
		refused++
	}
	if refused < 10 {
		t.Fatalf("the schema refused only %d golden cases of the structural kind: the cases moved", refused)
	}
}

// An editor-style check: the quickstart with one key misspelt, as an operator types it, is
// flagged by the schema, naming the key, while the loader refuses it too.
func TestSchemaFlagsAMisspeltKey(t *testing.T) {
	t.Parallel()
	s := compileSchema(t, model.Schema())
	data, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := validateYAML(s, data); err != nil {
		t.Fatalf("the quickstart itself fails: %v", err)
	}
	typo := bytes.Replace(data, []byte("    follows:"), []byte("    folows:"), 1)
	if bytes.Equal(typo, data) {
		t.Fatal("the quickstart has no `follows:` to misspell")
	}
	err = validateYAML(s, typo)
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("the schema accepts `folows:`: %v", err)
	}
	if !strings.Contains(verr.Error(), "folows") {
		t.Errorf("the schema's refusal does not name the misspelt key: %v", verr)
	}
	if _, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: typo}}); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("the loader accepts what the schema refuses: %v", err)
	}
}

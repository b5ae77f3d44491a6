package api_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// TestREADMESnippetsMatchDeploy keeps the README's nginx and Traefik
// snippets excerpts of the files under deploy/: every snippet line is a
// line of the file.
func TestREADMESnippetsMatchDeploy(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lang, marker, file string // snippets in lang that contain marker
	}{
		{"nginx", "auth_request", "../../deploy/nginx/rlcluster.conf"},
		{"yaml", "forwardAuth:", "../../deploy/traefik/dynamic.yml"},
	} {
		file, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(file), "\n") {
			lines[strings.TrimSpace(l)] = true
		}
		var blocks [][]string
		for _, b := range regexp.MustCompile("(?s)```"+tt.lang+"\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
			if strings.Contains(b[1], tt.marker) {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			t.Errorf("README has no %s snippet with %q", tt.lang, tt.marker)
		}
		for _, b := range blocks {
			for _, l := range strings.Split(b[1], "\n") {
				if l = strings.TrimSpace(l); l != "" && !lines[l] {
					t.Errorf("README's %s snippet line %q is not in %s", tt.lang, l, tt.file)
				}
			}
		}
	}
}

// TestEnvoyConfigExample checks the Envoy configuration that the README
// shows (and deploy/envoy/envoy.yaml holds) against Envoy's v3 API with
// go-control-plane: every field known, every typed_config resolvable,
// every message passing Envoy's validation rules, every route's cluster
// defined. No Envoy binary is available to CI, so this is the check.
func TestEnvoyConfigExample(t *testing.T) {
	bs := envoyExample(t, "../../deploy/envoy/envoy.yaml")
	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	if !clusters["rlcluster"] {
		t.Error("no rlcluster cluster")
	}
	js2, _ := protojson.Marshal(bs)
	for _, want := range []string{`"domain":"messaging"`, `"clusterName":"rlcluster"`, `"transportApiVersion":"V3"`, `"http2ProtocolOptions":{}`} {
		if !strings.Contains(string(js2), want) {
			t.Errorf("config lacks %s", want)
		}
	}
	for _, m := range findStrings(string(js2), `"cluster":"`) {
		if !clusters[m] {
			t.Errorf("a route names cluster %q, which is not defined", m)
		}
	}
}

// envoyExample reads the Envoy configuration at path (under deploy/),
// which the README must show verbatim, and returns it as Envoy's v3
// bootstrap after Envoy's validation rules pass on every message in it.
func envoyExample(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(b)+"```") {
		t.Errorf("README.md does not show %s verbatim", path)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("%s is not a valid Envoy v3 bootstrap: %v", path, err)
	}
	validateDeep(t, "bootstrap", bs.ProtoReflect())
	return &bs
}

// validateDeep runs Envoy's validation rules (protoc-gen-validate) on m
// and every message inside it, unpacking Any fields.
func validateDeep(t *testing.T, path string, m protoreflect.Message) {
	t.Helper()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		validateDeep(t, path+"("+a.GetTypeUrl()+")", inner.ProtoReflect())
		return
	}
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			for i := 0; i < val.List().Len(); i++ {
				validateDeep(t, p, val.List().Get(i).Message())
			}
		case fd.IsMap():
			val.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					validateDeep(t, p+"["+k.String()+"]", v.Message())
				}
				return true
			})
		default:
			validateDeep(t, p, val.Message())
		}
		return true
	})
}

// findStrings returns the JSON string values that follow each prefix.
func findStrings(s, prefix string) []string {
	var out []string
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			return out
		}
		s = s[i+len(prefix):]
		j := strings.IndexByte(s, '"')
		if j < 0 {
			return out
		}
		out = append(out, s[:j])
		s = s[j:]
	}
}

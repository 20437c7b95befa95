package rls_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// envoyYAML returns the envoy.yaml of envoy/README.md: its YAML block that
// starts with static_resources.
func envoyYAML(t *testing.T) []byte {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for _, block := range strings.Split(string(readme), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.HasPrefix(block, "static_resources:") {
			return []byte(block)
		}
	}
	t.Fatal("README.md: no yaml block starting with static_resources")
	return nil
}

// The README's Envoy configuration is a valid Bootstrap, as Envoy's own
// protos and their validation rules read it, its typed configurations
// included (no Envoy binary runs here).
func TestReadmeEnvoyYAML(t *testing.T) {
	var doc any
	require.NoError(t, yaml.Unmarshal(envoyYAML(t), &doc))
	js, err := json.Marshal(doc)
	require.NoError(t, err)
	var b bootstrapv3.Bootstrap
	require.NoError(t, protojson.Unmarshal(js, &b))
	require.NoError(t, b.ValidateAll())
	var validateAny func(a *anypb.Any)
	validateAny = func(a *anypb.Any) {
		t.Helper()
		m, err := a.UnmarshalNew()
		require.NoError(t, err, a.GetTypeUrl())
		v, ok := m.(interface{ ValidateAll() error })
		require.True(t, ok, a.GetTypeUrl())
		require.NoError(t, v.ValidateAll(), a.GetTypeUrl())
		if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
			require.Len(t, hcm.GetHttpFilters(), 2)
			for _, f := range hcm.GetHttpFilters() {
				validateAny(f.GetTypedConfig())
			}
		}
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				validateAny(f.GetTypedConfig())
			}
		}
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, a := range c.GetTypedExtensionProtocolOptions() {
			validateAny(a)
		}
	}
}

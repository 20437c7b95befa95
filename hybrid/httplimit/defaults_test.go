package httplimit

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/hybridlimit/hybridlimit/internal/doctable"
)

// TestDefaults holds docs/operating.md's rows for package httplimit against
// the constants and against what withDefaults fills in.
func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	file := WatchConfig{}.withDefaults(defaultFilePollInterval)
	rds := WatchConfig{}.withDefaults(defaultRedisPollInterval)
	doctable.Check(t, doctable.Package{
		Name: "httplimit",
		Defaults: []doctable.Default{
			{Config: "Config", Field: "APIKeyHeader", Const: "defaultAPIKeyHeader", Value: defaultAPIKeyHeader, Got: c.APIKeyHeader},
			{Config: "Config", Field: "UnavailableStatus", Const: "defaultUnavailableStatus", Value: defaultUnavailableStatus, Doc: "503 (Service Unavailable)", Got: c.UnavailableStatus},
			{Config: "Config", Field: "Clock", Doc: "the system clock (time.Now)", Got: c.Clock},
			{Config: "Config", Field: "MeterProvider", Doc: "otel.GetMeterProvider()", Got: c.MeterProvider},
			{Config: "Config", Field: "Logger", Doc: "slog.Default()", Got: c.Logger},
			{Config: "WatchConfig", Field: "PollInterval", When: "WatchFile", Const: "defaultFilePollInterval", Value: defaultFilePollInterval, Got: file.PollInterval},
			{Config: "WatchConfig", Field: "PollInterval", When: "WatchRedis", Const: "defaultRedisPollInterval", Value: defaultRedisPollInterval, Got: rds.PollInterval},
			{Config: "WatchConfig", Field: "Debounce", Const: "defaultDebounce", Value: defaultDebounce, Got: file.Debounce},
			{Config: "WatchConfig", Field: "Logger", Doc: "slog.Default()", Got: file.Logger},
			{Config: "WatchConfig", Field: "MeterProvider", Doc: "otel.GetMeterProvider()", Got: file.MeterProvider},
		},
		Bounds: []doctable.Bound{
			{What: "rules document", Const: "maxRulesSize", Value: maxRulesSize, Doc: "524,288 bytes (512 KiB)"},
			{What: "rules in a document", Const: "maxRules", Value: maxRules, Doc: "2,048"},
			{What: "overrides in a document", Const: "maxOverrides", Value: maxOverrides, Doc: "8,192"},
			{What: "string value in a document", Const: "maxFieldSize", Value: maxFieldSize, Doc: "1,024 bytes"},
		},
		Filled: []doctable.Filled{
			{Config: "Config", Zero: Config{}, With: c},
			{Config: "WatchConfig", Zero: WatchConfig{}, With: file},
			{Config: "WatchConfig", Zero: WatchConfig{}, With: rds},
		},
	})
	assert.Equal(t, systemClock{}, c.Clock)
	assert.Equal(t, otel.GetMeterProvider(), c.MeterProvider)
	assert.Same(t, slog.Default(), c.Logger)
	assert.Equal(t, otel.GetMeterProvider(), file.MeterProvider)
	assert.Same(t, slog.Default(), file.Logger)
}

// TestConfigValidate: withDefaults changes no field that is set, and
// validate names the bad field in the package's form.
func TestConfigValidate(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	set := Config{
		TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "X-Real-IP", IPv6Prefix: 64, APIKeyHeader: "K",
		RetryJitter: time.Second, UnavailableStatus: 500, Clock: systemClock{}, MeterProvider: noop.NewMeterProvider(), Logger: quiet,
	}
	assert.Equal(t, set, set.withDefaults(), "withDefaults changed a field that was set")
	require.NoError(t, set.validate())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.300"}}, `httplimit: invalid config: TrustedProxies[1] "10.0.0.300": ParseAddr("10.0.0.300"): IPv4 field has value >255`},
		{Config{TrustedHops: -1}, "httplimit: invalid config: TrustedHops -1: must not be negative"},
		{Config{TrustedHops: 1, TrustedProxies: []string{"10.0.0.1"}}, "httplimit: invalid config: TrustedHops 1: set with TrustedProxies; use one"},
		{Config{IPv6Prefix: 129}, "httplimit: invalid config: IPv6Prefix 129: must be from 1 to 128"},
		{Config{RetryJitter: -time.Second}, "httplimit: invalid config: RetryJitter -1s: must not be negative"},
		{Config{UnavailableStatus: 302}, "httplimit: invalid config: UnavailableStatus 302: must be from 400 to 599"},
		{Config{ClientIPHeader: "X-Real-IP"}, `httplimit: invalid config: ClientIPHeader "X-Real-IP": needs TrustedProxies or TrustedHops, or anyone could set it`},
		{Config{APIKeyHeader: "X Key"}, `httplimit: invalid config: APIKeyHeader "X Key": not a header name`},
	} {
		err := tc.cfg.withDefaults().validate()
		assert.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
		assert.EqualError(t, err, tc.want)
	}

	w := WatchConfig{PollInterval: time.Second, Debounce: time.Second, Logger: quiet, MeterProvider: noop.NewMeterProvider()}
	assert.Equal(t, w, w.withDefaults(defaultFilePollInterval), "withDefaults changed a field that was set")
	for _, tc := range []struct {
		cfg  WatchConfig
		want string
	}{
		{WatchConfig{PollInterval: -time.Second}, "httplimit: invalid config: PollInterval -1s: must not be negative"},
		{WatchConfig{Debounce: -time.Second}, "httplimit: invalid config: Debounce -1s: must not be negative"},
	} {
		err := tc.cfg.withDefaults(defaultFilePollInterval).validate()
		assert.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
		assert.EqualError(t, err, tc.want)
	}
}

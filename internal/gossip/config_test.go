package gossip

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPresets: a Config's zero fields take DefaultWANConfig's values (and
// Grace FlushInterval's), both presets validate once named, and
// LocalConfig only shortens memberlist's timings.
func TestPresets(t *testing.T) {
	wan := DefaultWANConfig()
	got := Config{FlushInterval: 7 * time.Millisecond}.withDefaults()
	want := wan
	want.FlushInterval, want.Grace = 7*time.Millisecond, 7*time.Millisecond
	got.Now, got.Logger, want.Now, want.Logger = nil, nil, nil, nil // funcs and pointers: checked below
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Config{FlushInterval: 7ms}.withDefaults() = %+v, want %+v", got, want)
	}
	if d := (Config{}).withDefaults(); d.Now == nil || d.Logger == nil {
		t.Errorf("withDefaults left Now or Logger nil")
	}
	local := LocalConfig()
	for _, c := range []struct {
		name     string
		wan, loc time.Duration
	}{
		{"GossipInterval", wan.GossipInterval, local.GossipInterval},
		{"ProbeInterval", wan.ProbeInterval, local.ProbeInterval},
		{"PushPullInterval", wan.PushPullInterval, local.PushPullInterval},
		{"GossipToTheDeadTime", wan.GossipToTheDeadTime, local.GossipToTheDeadTime},
		{"ReconnectInterval", wan.ReconnectInterval, local.ReconnectInterval},
		{"JoinBackoff", wan.JoinBackoff, local.JoinBackoff},
	} {
		if c.loc >= c.wan {
			t.Errorf("LocalConfig().%s = %v, want shorter than DefaultWANConfig's %v", c.name, c.loc, c.wan)
		}
	}
	if local.FlushInterval != wan.FlushInterval || local.MaxStaleness != wan.MaxStaleness || local.Suspicion != wan.Suspicion {
		t.Errorf("LocalConfig changed replication settings: %+v", local)
	}
	for name, c := range map[string]Config{"DefaultWANConfig": wan, "LocalConfig": local} {
		c.Name, c.Region, c.BindAddr = "n", "eu", "127.0.0.1:0"
		if err := c.Validate(); err != nil {
			t.Errorf("%s, named, on loopback: Validate() = %v", name, err)
		}
	}
}

// TestValidate: Validate judges a config with its defaults applied, and
// reports every problem, each naming its field.
func TestValidate(t *testing.T) {
	base := Config{Name: "n", Region: "eu", BindAddr: "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"suspicion of two heartbeats", func(c *Config) { c.HeartbeatInterval, c.Suspicion = time.Second, 2*time.Second }, ""},
		{"suspicion under two heartbeats", func(c *Config) { c.HeartbeatInterval, c.Suspicion = time.Second, 1500*time.Millisecond },
			"gossip: invalid config: Suspicion: 1.5s, want at least twice the heartbeat interval, 2s"},
		{"default suspicion, long heartbeat", func(c *Config) { c.HeartbeatInterval = time.Second },
			"gossip: invalid config: Suspicion: 1s, want at least twice the heartbeat interval, 2s"},
		{"no name", func(c *Config) { c.Name = "" }, "gossip: invalid config: Name: required"},
		{"region too long for its replicas", func(c *Config) { c.Region = strings.Repeat("r", 58) },
			"gossip: invalid config: Region: 58 bytes, want at most 57 with gossip (a node's replica, <region>~<id>, must hold the region's whole name)"},
		{"every problem", func(c *Config) { c.Name, c.BindAddr, c.JoinBackoff = "", "nowhere", -time.Second },
			"gossip: invalid config: Name: required\n" +
				"gossip: invalid config: BindAddr: \"nowhere\": address nowhere: missing port in address\n" +
				"gossip: invalid config: JoinBackoff: -1s, want 0 (the default) or more"},
		{"keyless off loopback", func(c *Config) { c.BindAddr = "0.0.0.0:0" },
			"gossip: invalid config: " + ErrNoKey.Error() + ": address 0.0.0.0:0 is not loopback"},
	} {
		cfg := base
		c.edit(&cfg)
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", c.name, err)
			}
			continue
		}
		if err == nil || err.Error() != c.want || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want %q wrapping ErrConfig", c.name, err, c.want)
		}
	}
}

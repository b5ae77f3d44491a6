package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// loadRules loads the rules c names, if any, into a Reloader that keeps
// them current. It returns nil, nil when no rules are configured.
func loadRules(c config, log *slog.Logger, reg prometheus.Registerer) (*rules.Reloader, error) {
	if c.Rules == "" {
		return nil, nil
	}
	rl, err := rules.NewReloader(rules.ReloaderConfig{
		Path:       c.Rules,
		Interval:   c.RulesReloadInterval,
		MaxRules:   c.MaxRules,
		Logger:     log,
		Registerer: reg,
	})
	if err != nil {
		n := strings.Count(err.Error(), "\n") + 1
		return nil, fmt.Errorf("rules %s: %d %s:\n%w", c.Rules, n, plural(n, "problem", "problems"), err)
	}
	log.Info("rules loaded", "path", c.Rules, "rules", rl.Rules().Summary())
	for _, w := range rl.Rules().Warnings() {
		log.Warn("rules: limit refused in a cluster of several regions", "path", c.Rules, "warning", w)
	}
	return rl, nil
}

// watchRules reloads the rules into h on SIGHUP (through reload) and,
// unless --rules-reload-interval is negative, whenever their files change,
// until ctx is done.
func watchRules(ctx context.Context, rl *rules.Reloader, h *api.Server, reload *reloaders) {
	if rl == nil {
		return
	}
	reload.add("rules", func() error { return rl.Reload(h.SetRules) })
	go rl.Run(ctx, h.SetRules)
}

// errInvalidRules is what `rlnode validate` returns for an invalid
// configuration, after listing the problems.
var errInvalidRules = errors.New("rules are invalid")

// validate implements `rlnode validate --rules PATH`: it loads the rules
// as the node would and prints a summary to stdout, or every problem to
// stderr and returns an error. Valid rules that a cluster of several
// regions refuses (a region-local algorithm with global scope) are
// warnings on stderr, one per line starting "warning: ", and do not fail
// it: the file does not know how many regions will load it.
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlnode validate", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	path := fs.String("rules", getenv(envName("rules")), "rules file or directory to check (`path`)")
	maxRules := fs.Int("max-rules", defaultMaxRules, "most rules the node will accept (`count`), as --max-rules")
	if v := getenv(envName("max-rules")); v != "" {
		if err := fs.Set("max-rules", v); err != nil {
			return fmt.Errorf("validate: %s=%q: %w", envName("max-rules"), v, err)
		}
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: rlnode validate --rules PATH\n\nChecks a rules file or directory (native rules or envoyproxy/ratelimit\ndomains) as the node would load it and lists every problem; exits 0\nwhen it is valid. A limit that a cluster of several regions refuses (a\nregion-local algorithm with global scope) is a warning, not a problem. Each flag can also be set by its environment variable.\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = help.WriteTo(stdout)
			return nil
		}
		_, _ = help.WriteTo(stderr)
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("validate: unexpected arguments: %q", fs.Args())
	}
	if *path == "" {
		return errors.New("validate: --rules is required")
	}
	rs, err := rules.LoadMax(*path, *maxRules)
	if err != nil {
		problems := strings.Split(err.Error(), "\n")
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return fmt.Errorf("%s: %d %s: %w", *path, len(problems), plural(len(problems), "problem", "problems"), errInvalidRules)
	}
	for _, w := range rs.Warnings() {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	fmt.Fprintf(stdout, "%s: valid: %s\n", *path, rs.Summary())
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

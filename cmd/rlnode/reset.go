package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/rlcluster/rlcluster/client"
)

// resetFlags are rlnode reset's flags, each also set by its environment
// variable.
type resetFlags struct {
	addr, rule, scope string
	inline            bool
	timeout           time.Duration
}

func newResetFlagSet(f *resetFlags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rlnode reset", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.addr, "addr", "http://127.0.0.1:8080", "the node's API `URL`")
	fs.StringVar(&f.rule, "rule", "", "the rule whose counter of KEY to clear (`name`)")
	fs.BoolVar(&f.inline, "inline", false, "clear KEY's inline-limit counters instead of a rule's")
	fs.StringVar(&f.scope, "scope", "global", "with --inline, the inline limits' `scope`: global or region")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the node (`duration`)")
	return fs
}

// reset runs `rlnode reset KEY --rule R`: it asks the node at --addr to
// clear KEY's counts in every region, with the bearer token in
// RLNODE_AUTH_TOKEN (its first word) when set, and prints the reset
// instant.
func reset(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var f resetFlags
	var help bytes.Buffer
	fs := newResetFlagSet(&f, &help)
	fs.VisitAll(func(fl *flag.Flag) {
		if v := getenv(envName(fl.Name)); v != "" {
			_ = fs.Set(fl.Name, v)
		}
	})
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: rlnode reset KEY (--rule NAME | --inline) [--addr URL]\n\nClears KEY's counts under a rule (or its inline-limit counters) in every\nregion. With bearer tokens required, RLNODE_AUTH_TOKEN must hold a token\nwith the admin scope. Each flag can also be set by its environment variable.\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	// The key may come before or after the flags.
	var key string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		key, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = help.WriteTo(stdout)
			return nil
		}
		_, _ = help.WriteTo(stderr)
		return err
	}
	if key == "" && fs.NArg() > 0 {
		key = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("reset: unexpected arguments: %q", fs.Args())
	}
	var p client.Policy
	switch {
	case key == "":
		return errors.New("reset: KEY is required (rlnode reset KEY --rule NAME)")
	case f.rule != "" && f.inline:
		return errors.New("reset: give --rule or --inline, not both")
	case f.rule != "":
		p = client.Rule(f.rule)
	case f.inline:
		lim := client.Limit{Limit: 1, Window: time.Second}
		switch f.scope {
		case "global":
		case "region":
			lim.Scope = client.ScopeRegion
		default:
			return fmt.Errorf("reset: --scope %q is not global or region", f.scope)
		}
		p = lim
	default:
		return errors.New("reset: --rule NAME or --inline is required")
	}
	opts := []client.Option{client.WithTimeout(f.timeout)}
	if tok, _, _ := strings.Cut(strings.TrimSpace(getenv(authTokenEnv)), " "); tok != "" {
		opts = append(opts, client.WithConnectOptions(connect.WithInterceptors(bearer(tok))))
	}
	c, err := client.New(f.addr, append(opts, client.WithHTTPClient(http.DefaultClient))...)
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	at, err := c.Reset(ctx, key, p)
	if err != nil {
		return fmt.Errorf("reset %q: %w", key, err)
	}
	fmt.Fprintf(stdout, "reset %s at %s\n", key, at.UTC().Format(time.RFC3339Nano))
	return nil
}

// bearer adds "Authorization: Bearer tok" to every call.
func bearer(tok string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tok)
			return next(ctx, req)
		}
	}
}

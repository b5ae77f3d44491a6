package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// iptables runs one iptables variant (iptables, iptables-nft or
// iptables-legacy) against the filter table.
type iptables struct {
	bin string
}

func (t iptables) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, t.bin, append([]string{"-w", "5"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", t.bin, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func (t iptables) chainExists(ctx context.Context, chain string) bool {
	_, err := t.run(ctx, "-t", "filter", "-S", chain)
	return err == nil
}

// pickIPTables resolves cfg.IPTables "auto": the variant holding Docker's
// chains wins (rules in the other one would not see Docker's isolation
// verdicts), else the first variant that can list the filter table.
func pickIPTables(ctx context.Context, want string) (iptables, error) {
	if want != "auto" {
		t := iptables{bin: want}
		if _, err := t.run(ctx, "-t", "filter", "-S", "INPUT"); err != nil {
			return iptables{}, fmt.Errorf("check %s: %w", want, err)
		}
		return t, nil
	}
	candidates := []string{"iptables-nft", "iptables-legacy", "iptables"}
	var usable []iptables
	var errs []error
	for _, bin := range candidates {
		if _, err := exec.LookPath(bin); err != nil {
			errs = append(errs, err)
			continue
		}
		t := iptables{bin: bin}
		if _, err := t.run(ctx, "-t", "filter", "-S", "INPUT"); err != nil {
			errs = append(errs, err)
			continue
		}
		if t.chainExists(ctx, "DOCKER-USER") {
			return t, nil
		}
		usable = append(usable, t)
	}
	if len(usable) == 0 {
		return iptables{}, fmt.Errorf("no usable iptables: %w", errors.Join(errs...))
	}
	return usable[0], nil
}

// ruleSpec is the argument list of one rule in our chain.
type ruleSpec []string

// buildRules returns one NFQUEUE rule per ordered pair of distinct regions,
// in a stable order. --queue-bypass is not set: while wanem is not running
// its chain does not exist, and while it is running every packet between
// regions must pass through it.
func buildRules(cfg Config) []ruleSpec {
	var out []ruleSpec
	names := cfg.regionNames()
	for _, a := range names {
		for _, b := range names {
			if a == b {
				continue
			}
			out = append(out, ruleSpec{
				"-s", cfg.Regions[a].String(), "-d", cfg.Regions[b].String(),
				"-m", "comment", "--comment", "rlcluster wanem " + a + "->" + b,
				"-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(cfg.QueueNum)),
			})
		}
	}
	return out
}

// hookChain resolves cfg.Hook "auto".
func hookChain(ctx context.Context, t iptables, hook string) string {
	if hook != "auto" {
		return hook
	}
	if t.chainExists(ctx, "DOCKER-USER") {
		return "DOCKER-USER"
	}
	return "FORWARD"
}

// removeRules deletes every jump to chain from the hook chains wanem may
// have used, then flushes and deletes chain. It is safe to call when
// nothing is installed, and it is what start-up runs to clear stale rules.
func removeRules(ctx context.Context, t iptables, chain string) error {
	if !t.chainExists(ctx, chain) {
		return nil
	}
	for _, hook := range []string{"DOCKER-USER", "FORWARD", "OUTPUT", "INPUT"} {
		for i := 0; i < 100; i++ { // one jump per earlier run at most, but be thorough
			if _, err := t.run(ctx, "-t", "filter", "-D", hook, "-j", chain); err != nil {
				break
			}
		}
	}
	if _, err := t.run(ctx, "-t", "filter", "-F", chain); err != nil {
		return fmt.Errorf("flush chain: %w", err)
	}
	if _, err := t.run(ctx, "-t", "filter", "-X", chain); err != nil {
		return fmt.Errorf("delete chain: %w", err)
	}
	return nil
}

// installRules creates chain with the rules and jumps to it from hook (first
// rule of hook). Stale rules from an earlier run are removed first.
func installRules(ctx context.Context, t iptables, cfg Config, hook string) error {
	if err := removeRules(ctx, t, cfg.Chain); err != nil {
		return fmt.Errorf("remove stale rules: %w", err)
	}
	if _, err := t.run(ctx, "-t", "filter", "-N", cfg.Chain); err != nil {
		return fmt.Errorf("create chain: %w", err)
	}
	for _, r := range buildRules(cfg) {
		if _, err := t.run(ctx, append([]string{"-t", "filter", "-A", cfg.Chain}, r...)...); err != nil {
			return fmt.Errorf("add rule: %w", err)
		}
	}
	if _, err := t.run(ctx, "-t", "filter", "-I", hook, "1", "-j", cfg.Chain); err != nil {
		return fmt.Errorf("hook chain: %w", err)
	}
	return nil
}

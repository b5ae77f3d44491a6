package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// probe sends one Check over Connect JSON and wants 200.
func probe(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	body := `{"key":"bench-probe","hits":1,"limit":{"limit":"1000000000","window":"60s"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+checkPath, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: status %d: %s", resp.StatusCode, b)
	}
	return nil
}

// probeAll probes the Connect API at tg.base and Envoy's RLS at
// tg.envoyBase.
func probeAll(ctx context.Context, tg target) error {
	if err := probe(ctx, tg.base); err != nil {
		return err
	}
	return probeEnvoy(ctx, tg.envoyBase)
}

// probeEnvoy sends one ShouldRateLimit and wants an answer.
func probeEnvoy(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := NewEnvoyClient(base, 1)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, _, err := c.Do(ctx, NewEnvoyHotKey("bench-probe"), 0, nil); err != nil {
		return fmt.Errorf("probe envoy: %w", err)
	}
	return nil
}

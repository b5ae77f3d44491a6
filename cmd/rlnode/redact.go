package main

import "net/url"

// redactURL returns u with any password replaced, for logs.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

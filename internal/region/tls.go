package region

import (
	"crypto/tls"
	"errors"
)

// errTLSScheme is returned when RedisConfig.TLSConfig is set for a URL that
// does not ask for TLS.
var errTLSScheme = errors.New("region: redis TLS config given but the URL scheme is not rediss:// or rediss+sentinel://")

// withTLS returns the TLS config a client for a URL with this scheme should
// use: fromURL (go-redis's, set for rediss) unless cfg.TLSConfig is set, in
// which case a clone of it, keeping fromURL's ServerName when it names none.
func withTLS(cfg RedisConfig, fromURL *tls.Config) (*tls.Config, error) {
	if cfg.TLSConfig == nil {
		return fromURL, nil
	}
	if fromURL == nil {
		return nil, errTLSScheme
	}
	tc := cfg.TLSConfig.Clone()
	if tc.ServerName == "" {
		tc.ServerName = fromURL.ServerName
	}
	if tc.MinVersion == 0 {
		tc.MinVersion = tls.VersionTLS12
	}
	return tc, nil
}

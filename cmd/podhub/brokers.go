package main

import (
	"fmt"
	"strings"
)

// maxBrokers bounds the external broker's URLs: the nodes of one cluster.
const maxBrokers = 16

// brokers are the external broker's URLs, broker's (a comma-separated
// list is several nodes of one cluster) then brokers'; none: the
// embedded broker. Every URL is mqtt:// or mqtts://, all of one scheme
// (the hub never falls back from TLS to a plain connection), and broker
// and brokers are not both set.
func (cfg config) brokers() ([]string, error) {
	if cfg.Broker != "" && len(cfg.Brokers) > 0 {
		return nil, fmt.Errorf("podhub.yaml: set broker (or --broker) or brokers, not both")
	}
	var urls []string
	for _, u := range append(strings.Split(cfg.Broker, ","), cfg.Brokers...) {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 && (cfg.Broker != "" || len(cfg.Brokers) > 0) {
		return nil, fmt.Errorf("broker: no URL")
	}
	if len(urls) > maxBrokers {
		return nil, fmt.Errorf("broker: %d URLs, at most %d", len(urls), maxBrokers)
	}
	scheme := ""
	for _, u := range urls {
		s, _, ok := strings.Cut(u, "://")
		if !ok || s != "mqtt" && s != "mqtts" {
			return nil, fmt.Errorf("broker %q: want mqtt://HOST:PORT or mqtts://HOST:PORT", u)
		}
		if scheme != "" && s != scheme {
			return nil, fmt.Errorf("broker %q: every broker must be mqtts:// or every one mqtt://, not both", u)
		}
		scheme = s
	}
	return urls, nil
}

package config

import (
	"encoding/json"
	"time"
)

// Duration is a setting written as Go writes durations ("90s", "5m"), as
// metav1.Duration is; a null (a key with no value) keeps the default.
type Duration struct{ time.Duration }

// UnmarshalJSON decodes "1m30s"; null leaves d as it is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON encodes d as Go writes it.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

package runtime

import (
	"fmt"
	"path"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// SubPath is a volume mount's subPath, its subPathExpr expanded as the
// kubelet expands it (ExpandContainerVolumeMounts, then makeMounts'
// checks): $(VAR) takes the value of one of the container's env vars,
// whose environment env is (Resolve's); a variable it does not declare,
// or declares empty, is an error, as is a result that is absolute or
// steps up with "..".
func SubPath(m v1.VolumeMount, c *v1.Container, env []string) (string, error) {
	if m.SubPathExpr == "" {
		return m.SubPath, nil
	}
	values := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		values[k] = v
	}
	declared := map[string]bool{}
	for _, e := range c.Env {
		declared[e.Name] = true
	}
	var missing []string
	sub := expandWith(m.SubPathExpr, func(name string) (string, bool) {
		v := values[name]
		if !declared[name] || v == "" {
			missing = append(missing, name)
			v = ""
		}
		return v, true
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Compact(missing), ", "))
	}
	if path.IsAbs(sub) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return "", fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", sub)
		}
	}
	return sub, nil
}

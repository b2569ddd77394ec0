package kinds

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"
)

// checkQuantities parses every resource quantity (resources.requests,
// resources.limits, overhead) anywhere in the object with its path,
// because the typed decoder's quantity errors do not say where.
func checkQuantities(js []byte) error {
	var doc any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &doc); err != nil {
		return nil // the typed decode reports shape errors
	}
	return walkQuantities(doc, "", "")
}

func walkQuantities(v any, path, parent string) error {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child := k
			if path != "" {
				child = path + "." + k
			}
			isList := (k == "requests" || k == "limits") && parent == "resources" || k == "overhead"
			if m, ok := t[k].(map[string]any); ok && isList {
				if err := checkList(child, m); err != nil {
					return err
				}
				continue
			}
			if err := walkQuantities(t[k], child, k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range t {
			if err := walkQuantities(e, fmt.Sprintf("%s[%d]", path, i), parent); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkList(path string, list map[string]any) error {
	names := make([]string, 0, len(list))
	for n := range list {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := fmt.Sprint(list[n])
		if _, err := resource.ParseQuantity(s); err != nil {
			return fmt.Errorf("%s[%s]: Invalid value: %q: %v", path, n, s, err)
		}
	}
	return nil
}

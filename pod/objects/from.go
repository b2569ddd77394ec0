package objects

import (
	v1 "k8s.io/api/core/v1"
)

// FromConfigMap is a ConfigMap as a device uses it: data and binaryData
// in one map (validation keeps their keys apart).
func FromConfigMap(cm *v1.ConfigMap) *Object {
	o := &Object{
		Ref:             Ref{Kind: ConfigMap, Namespace: cm.Namespace, Name: cm.Name},
		UID:             string(cm.UID),
		ResourceVersion: cm.ResourceVersion,
		Immutable:       isTrue(cm.Immutable),
		Data:            make(map[string][]byte, len(cm.Data)+len(cm.BinaryData)),
	}
	for k, v := range cm.Data {
		o.Data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		o.Data[k] = v
	}
	return o
}

// FromSecret is a Secret as a device uses it: its data with stringData
// merged in, its type Opaque when unset.
func FromSecret(s *v1.Secret) *Object {
	o := &Object{
		Ref:             Ref{Kind: Secret, Namespace: s.Namespace, Name: s.Name},
		UID:             string(s.UID),
		ResourceVersion: s.ResourceVersion,
		Immutable:       isTrue(s.Immutable),
		Type:            s.Type,
		Data:            make(map[string][]byte, len(s.Data)+len(s.StringData)),
	}
	if o.Type == "" {
		o.Type = v1.SecretTypeOpaque
	}
	for k, v := range SecretData(s) {
		o.Data[k] = v
	}
	return o
}

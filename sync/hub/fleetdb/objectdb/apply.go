package objectdb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// Apply stores the ConfigMaps and Secrets of objs, all or nothing, in one
// transaction with alongside (the rest of the same apply: the workloads'
// part; nil for none). What the API server checks against a stored
// object is checked (objects.ValidateConfigMapUpdate,
// ValidateSecretUpdate); the server's metadata is set whatever the file
// says: a new object gets a uid and creationTimestamp, a changed one the
// next resourceVersion, one applied unchanged keeps its own. Once
// committed, OnChange's functions hear what changed.
func (s *Store) Apply(objs *kinds.Objects, now time.Time, alongside func(*sql.Tx) error) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if alongside != nil {
		if err := alongside(tx); err != nil {
			return err
		}
	}
	a := &applyTx{s: s, tx: tx, objs: objs, now: now}
	for _, cm := range objs.ConfigMaps {
		if err := a.configMap(cm); err != nil {
			return err
		}
	}
	for _, sec := range objs.Secrets {
		if err := a.secret(sec); err != nil {
			return err
		}
	}
	if len(a.changed) > 0 {
		if err := checkBounds(tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.changed(a.changed)
	return nil
}

type applyTx struct {
	s       *Store
	tx      *sql.Tx
	objs    *kinds.Objects
	now     time.Time
	version int64 // the last resourceVersion given, 0 before the first
	changed []objects.Ref
}

func (a *applyTx) refused(ref objects.Ref, errs field.ErrorList) error {
	return fmt.Errorf("%s: %w", a.objs.Where(string(ref.Kind), ref.Namespace, ref.Name), errs.ToAggregate())
}

func (a *applyTx) configMap(cm *v1.ConfigMap) error {
	ref := objects.Ref{Kind: objects.ConfigMap, Namespace: cm.Namespace, Name: cm.Name}
	cm.TypeMeta = metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}
	old := &v1.ConfigMap{}
	found, err := a.load(ref, old)
	if err != nil {
		return err
	}
	serverMeta(&cm.ObjectMeta, &old.ObjectMeta, found, a.now)
	if found {
		if errs := objects.ValidateConfigMapUpdate(cm, old); len(errs) > 0 {
			return a.refused(ref, errs)
		}
		if equality.Semantic.DeepEqual(cm, old) {
			return nil
		}
	}
	if err := a.nextVersion(&cm.ObjectMeta); err != nil {
		return err
	}
	raw, err := json.Marshal(cm)
	if err != nil {
		return err
	}
	return a.put(ref, &cm.ObjectMeta, cm.Immutable, "", len(cm.Data)+len(cm.BinaryData), "", raw)
}

func (a *applyTx) secret(sec *v1.Secret) error {
	ref := objects.Ref{Kind: objects.Secret, Namespace: sec.Namespace, Name: sec.Name}
	sec.TypeMeta = metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}
	objects.SetSecretDefaults(sec)
	old := &v1.Secret{}
	found, err := a.load(ref, old)
	if err != nil {
		return err
	}
	serverMeta(&sec.ObjectMeta, &old.ObjectMeta, found, a.now)
	if found {
		if errs := objects.ValidateSecretUpdate(sec, old); len(errs) > 0 {
			return a.refused(ref, errs)
		}
		if equality.Semantic.DeepEqual(sec, old) {
			return nil
		}
	}
	if err := a.nextVersion(&sec.ObjectMeta); err != nil {
		return err
	}
	raw, err := json.Marshal(sec)
	if err != nil {
		return err
	}
	keyID, sealed, err := a.s.keys.Load().seal(raw, aad(ref, string(sec.UID)))
	if err != nil {
		return fmt.Errorf("%s: %w", a.objs.Where("Secret", ref.Namespace, ref.Name), err)
	}
	clear(raw)
	return a.put(ref, &sec.ObjectMeta, sec.Immutable, sec.Type, len(sec.Data), keyID, sealed)
}

// load reads the stored object of ref into v, if there is one.
func (a *applyTx) load(ref objects.Ref, v any) (bool, error) {
	err := a.s.one(a.tx, ref, v)
	if _, missing := err.(*objects.NotFoundError); missing {
		return false, nil
	}
	return err == nil, err
}

// nextVersion gives m the objects' next resourceVersion.
func (a *applyTx) nextVersion(m *metav1.ObjectMeta) error {
	if err := a.tx.QueryRow(`UPDATE config_object_version SET last = last + 1 RETURNING last`).Scan(&a.version); err != nil {
		return err
	}
	m.ResourceVersion = strconv.FormatInt(a.version, 10)
	return nil
}

func (a *applyTx) put(ref objects.Ref, m *metav1.ObjectMeta, immutable *bool, typ v1.SecretType, keys int, keyID string, raw []byte) error {
	_, err := a.tx.Exec(`INSERT INTO config_objects (kind, namespace, name, uid, version, created, immutable, type, keys, key_id, object)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(kind, namespace, name) DO UPDATE SET uid = excluded.uid, version = excluded.version, created = excluded.created,
			immutable = excluded.immutable, type = excluded.type, keys = excluded.keys, key_id = excluded.key_id, object = excluded.object`,
		ref.Kind, ref.Namespace, ref.Name, string(m.UID), a.version, m.CreationTimestamp.UnixMilli(),
		immutable != nil && *immutable, string(typ), keys, keyID, raw)
	if err == nil {
		a.changed = append(a.changed, ref)
	}
	return err
}

// serverMeta sets the metadata the API server owns, whatever the file
// says: a new object's uid and creationTimestamp, a stored one's kept.
func serverMeta(m, old *metav1.ObjectMeta, found bool, now time.Time) {
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds, m.ManagedFields = nil, nil, nil
	m.Generation = 0
	if !found {
		m.UID = uuid.NewUUID()
		m.CreationTimestamp = metav1.NewTime(now.UTC().Truncate(time.Second))
		m.ResourceVersion = ""
		return
	}
	m.UID, m.CreationTimestamp, m.ResourceVersion = old.UID, old.CreationTimestamp, old.ResourceVersion
}

// checkBounds refuses an apply that would make the objects too many or
// too large in all.
func checkBounds(tx *sql.Tx) error {
	var n, bytes int64
	if err := tx.QueryRow(`SELECT COUNT(*), COALESCE(SUM(LENGTH(object)), 0) FROM config_objects`).Scan(&n, &bytes); err != nil {
		return err
	}
	switch {
	case n > MaxObjects:
		return fmt.Errorf("the hub would hold %d ConfigMaps and Secrets, more than the %d it keeps", n, MaxObjects)
	case bytes > MaxBytes:
		return fmt.Errorf("the hub's ConfigMaps and Secrets would take %d bytes, more than the %d it keeps", bytes, MaxBytes)
	}
	return nil
}

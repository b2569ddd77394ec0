package protocol

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/seal"
)

func entry(name string) ObjectEntry {
	return ObjectEntry{Kind: "Secret", Namespace: "default", Name: name, UID: "u-" + name, ResourceVersion: "7"}
}

func TestObjectIndexRoundTripAndRefusals(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	_ = otherPub
	raw, err := SignObjectIndex(ObjectIndex{Device: "dev-a", Generation: 3, Entries: []ObjectEntry{entry("db"), entry("tls")}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := OpenObjectIndex(raw, "dev-a", pub)
	if err != nil || ix.Generation != 3 || len(ix.Entries) != 2 || !ix.Entries[0].Same(entry("db")) {
		t.Fatalf("open: %+v %v", ix, err)
	}
	if _, err := OpenObjectIndex(raw, "dev-b", pub); err == nil || !strings.Contains(err.Error(), `for device "dev-a"`) {
		t.Errorf("another device's index: %v", err)
	}
	forged, _ := SignObjectIndex(ObjectIndex{Device: "dev-a", Generation: 4}, otherKey)
	if _, err := OpenObjectIndex(forged, "dev-a", pub); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("forged index: %v", err)
	}
	// A signed desired document never opens as an index.
	desired, _ := signDoc(contextOrder, ObjectIndex{Schema: Schema, Device: "dev-a", Generation: 5}, key)
	if _, err := OpenObjectIndex(desired, "dev-a", pub); err == nil {
		t.Error("a document signed in another context opened as an index")
	}
	for _, bad := range []ObjectIndex{
		{Device: "dev-a", Generation: 0},
		{Device: "dev-a", Generation: 1, Entries: []ObjectEntry{entry("db"), entry("db")}},
		{Device: "dev-a", Generation: 1, Entries: []ObjectEntry{{Kind: "Pod", Namespace: "default", Name: "x", UID: "u", ResourceVersion: "1"}}},
		{Device: "dev-a", Generation: 1, Entries: []ObjectEntry{{Kind: "Secret", Namespace: "default", Name: "../x", UID: "u", ResourceVersion: "1"}}},
		{Device: "dev-a", Generation: 1, Entries: []ObjectEntry{{Kind: "Secret", Namespace: "default", Name: "x", UID: "", ResourceVersion: "1"}}},
	} {
		if _, err := SignObjectIndex(bad, key); err == nil {
			t.Errorf("signed a bad index %+v", bad)
		}
	}
}

func TestObjectMessageSealedForOneDevice(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	devA, _ := seal.GenerateKey()
	devB, _ := seal.GenerateKey()
	e := entry("db")
	data := map[string][]byte{"password": []byte("marker-8f3a"), "user": []byte("app"), "empty": {}}
	sealed, err := seal.Seal(devA.Public(), SealInfo("dev-a", e), EncodeData(data))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := EncodeObject(ObjectHeader{Device: "dev-a", Entry: e, Type: "Opaque"}, sealed, key)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(msg, []byte("marker-8f3a")) {
		t.Fatal("the secret shows in the message")
	}
	h, got, err := OpenObject(msg, "dev-a", pub)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := devA.Open(SealInfo("dev-a", h.Entry), got)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeData(plain)
	if err != nil || string(back["password"]) != "marker-8f3a" || len(back) != 3 {
		t.Fatalf("data: %q %v", back, err)
	}
	if _, err := devB.Open(SealInfo("dev-a", h.Entry), got); err == nil {
		t.Error("another device's key opened it")
	}
	// The same sealed bytes under another object's header do not open.
	other := entry("tls")
	if _, err := devA.Open(SealInfo("dev-a", other), got); err == nil {
		t.Error("sealed data opened under another object's info")
	}
	tampered := bytes.Clone(msg)
	tampered[len(tampered)-1] ^= 1
	if _, _, err := OpenObject(tampered, "dev-a", pub); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("tampered sealed data: %v", err)
	}
	if _, _, err := OpenObject(msg, "dev-b", pub); err == nil {
		t.Error("opened on another device")
	}
	big := make([]byte, MaxObjectMessageBytes)
	if _, err := EncodeObject(ObjectHeader{Device: "dev-a", Entry: e}, big, key); err == nil {
		t.Error("an oversized object was encoded")
	}
}

func TestObjectDataDecodingRefusesMalformed(t *testing.T) {
	good := EncodeData(map[string][]byte{"a": []byte("1"), "b": []byte("22")})
	for _, bad := range [][]byte{
		good[:len(good)-1],
		append(bytes.Clone(good), 0x05),
		{0x00, 0x00},                           // empty key
		append(bytes.Clone(good), good[:3]...), // "a" again, out of order
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		if _, err := DecodeData(bad); err == nil {
			t.Errorf("decoded %x", bad)
		}
	}
	if m, err := DecodeData(nil); err != nil || len(m) != 0 {
		t.Errorf("empty: %v %v", m, err)
	}
}

func TestObjectGetAndSealKeyBounded(t *testing.T) {
	refs := make([]ObjectEntry, MaxObjectGetRefs+1)
	for i := range refs {
		refs[i] = entry("x")
	}
	if _, err := EncodeObjectGet(refs); err == nil {
		t.Error("an oversized request was encoded")
	}
	raw, err := EncodeObjectGet(refs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if g, err := DecodeObjectGet(raw); err != nil || len(g.Refs) != 2 {
		t.Fatalf("decode: %v", err)
	}
	if _, err := DecodeObjectGet([]byte(`{"schema":1,"refs":[{"kind":"Secret","namespace":"default","name":"x","uid":"u","resourceVersion":"1"}],"extra":1}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
	k, _ := seal.GenerateKey()
	raw, err = EncodeSealKey("dev-a", k.Public().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sk, err := DecodeSealKey(raw)
	if err != nil || sk.Device != "dev-a" {
		t.Fatalf("seal key: %v", err)
	}
	if _, err := seal.ParsePublicKey(sk.PublicKey); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSealKey(bytes.Replace(raw, []byte(SealSuite), []byte("rsa"), 1)); err == nil {
		t.Error("another suite was accepted")
	}
}

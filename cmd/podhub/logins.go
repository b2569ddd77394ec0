package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/hub/gateway"
	"github.com/podvisor/podvisor/sync/pki"
)

// tokenFile holds the hashes of the HTTPS listener's bearer tokens.
const tokenFile = "tokens"

// token manages the HTTPS listener's bearer tokens: create prints a new
// one once, list shows their names, delete withdraws one (a running
// podhub serve refuses it at the next request).
func (c *cli) token(args []string) error {
	return runVerb("token", "podhub token create NAME [--kubeconfig FILE] [--server URL] | token list | token delete NAME", args,
		verb{"create", c.tokenCreate}, verb{"list", c.tokenList}, verb{"delete", c.tokenDelete})
}

func (c *cli) tokenCreate(args []string) error {
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "also write a kubeconfig file with the token (a new file, 0600)")
	server := fs.String("server", "", "the listener's URL in the kubeconfig (default from http.listen: https://HOST:PORT)")
	name, err := c.oneName(fs, args, "podhub token create NAME [--kubeconfig FILE] [--server URL]")
	if err != nil {
		return err
	}
	var kc *kubeconfigFile
	if *kubeconfig != "" {
		if kc, err = c.newKubeconfig(*kubeconfig, *server); err != nil {
			return err
		}
	}
	token, err := gateway.CreateToken(c.path(tokenFile), name, time.Now())
	if err != nil {
		return err
	}
	if kc != nil {
		kc.user(name, kubeUser{Token: token})
		if err := kc.write(); err != nil {
			gateway.DeleteToken(c.path(tokenFile), name)
			return err
		}
	}
	fmt.Fprintf(c.out, "%s\n", token)
	fmt.Fprintf(c.out, "token %q created; it is shown only this once (podhub keeps its SHA-256): use it as a bearer token or at the dashboard's login\n", name)
	if kc != nil {
		fmt.Fprintf(c.out, "wrote %s (server %s): kubectl --kubeconfig %s get nodes\n", kc.path, kc.server, kc.path)
	}
	return nil
}

func (c *cli) tokenList(args []string) error {
	fs := flag.NewFlagSet("token list", flag.ContinueOnError)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("token list: unexpected argument %q", pos[0])
	}
	if err := prepareDataDir(c.dataDir, false); err != nil {
		return err
	}
	list, err := gateway.ListTokens(c.path(tokenFile))
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintln(c.out, "No tokens.")
		return nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\n", t.Name, t.Created.Format(time.RFC3339))
	}
	return tw.Flush()
}

func (c *cli) tokenDelete(args []string) error {
	fs := flag.NewFlagSet("token delete", flag.ContinueOnError)
	name, err := c.oneName(fs, args, "podhub token delete NAME")
	if err != nil {
		return err
	}
	if err := gateway.DeleteToken(c.path(tokenFile), name); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "token %q deleted\n", name)
	return nil
}

// user manages the HTTPS listener's users with client certificates.
func (c *cli) user(args []string) error {
	return runVerb("user", "podhub user add NAME --kubeconfig FILE [--server URL] | user revoke NAME", args,
		verb{"add", c.userAdd}, verb{"revoke", c.userRevoke})
}

// userAdd issues a user's client certificate (CN=NAME, O=podhub:users)
// and writes it with its key into a kubeconfig file.
func (c *cli) userAdd(args []string) error {
	fs := flag.NewFlagSet("user add", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "the kubeconfig file to write, with the certificate and its key (a new file, 0600; required)")
	server := fs.String("server", "", "the listener's URL in the kubeconfig (default from http.listen: https://HOST:PORT)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *kubeconfig == "" {
		return errors.New("usage: podhub user add NAME --kubeconfig FILE [--server URL]")
	}
	if err := prepareDataDir(c.dataDir, false); err != nil {
		return err
	}
	kc, err := c.newKubeconfig(*kubeconfig, *server)
	if err != nil {
		return err
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return err
	}
	issued, err := ca.IssueUser(pos[0])
	if err != nil {
		return err
	}
	kc.user(pos[0], kubeUser{ClientCertificateData: issued.Cert, ClientKeyData: issued.Key})
	if err := kc.write(); err != nil {
		ca.RevokeUser(pos[0])
		return err
	}
	fmt.Fprintf(c.out, "issued user %s a certificate (serial %x, O=%s); wrote %s (server %s): kubectl --kubeconfig %s get nodes\n",
		pos[0], issued.Serial, pki.UsersOrganization, kc.path, kc.server, kc.path)
	return nil
}

func (c *cli) userRevoke(args []string) error {
	fs := flag.NewFlagSet("user revoke", flag.ContinueOnError)
	name, err := c.oneName(fs, args, "podhub user revoke NAME")
	if err != nil {
		return err
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return err
	}
	serials, err := ca.RevokeUser(name)
	if err != nil {
		return err
	}
	for _, s := range serials {
		fmt.Fprintf(c.out, "revoked certificate %x of user %s\n", s, name)
	}
	if len(serials) == 0 {
		fmt.Fprintf(c.out, "user %s's certificates were already revoked\n", name)
	}
	return nil
}

// kubeconfigFile is a kubeconfig for the HTTPS listener: cluster podhub
// (its URL and podhub's CA), one user, context podhub.
type kubeconfigFile struct {
	path, server string
	doc          kubeconfigDoc
}

// The kubeconfig's schema (clientcmd/api/v1), the fields written.
type kubeconfigDoc struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string      `json:"name"`
	Cluster kubeCluster `json:"cluster"`
}

type kubeCluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string   `json:"name"`
	User kubeUser `json:"user"`
}

type kubeUser struct {
	Token                 string `json:"token,omitempty"`
	ClientCertificateData []byte `json:"client-certificate-data,omitempty"`
	ClientKeyData         []byte `json:"client-key-data,omitempty"`
}

type namedContext struct {
	Name    string      `json:"name"`
	Context kubeContext `json:"context"`
}

type kubeContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// newKubeconfig checks what a kubeconfig at path needs before anything
// is issued: a new file, the server's URL, the CA.
func (c *cli) newKubeconfig(path, server string) (*kubeconfigFile, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("--kubeconfig %s: exists; name a new file (KUBECONFIG=a:b merges files)", path)
	}
	if server == "" {
		var err error
		if server, err = c.httpURL(); err != nil {
			return nil, err
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(c.pkiDir(), pki.CAFile))
	if err != nil {
		return nil, fmt.Errorf("CA (run podhub init): %w", err)
	}
	return &kubeconfigFile{path: path, server: server, doc: kubeconfigDoc{APIVersion: "v1", Kind: "Config",
		Clusters:       []namedCluster{{Name: "podhub", Cluster: kubeCluster{Server: server, CertificateAuthorityData: caPEM}}},
		CurrentContext: "podhub"}}, nil
}

// user sets the kubeconfig's user and its context.
func (k *kubeconfigFile) user(name string, u kubeUser) {
	userName := "podhub-" + name
	k.doc.Users = []namedUser{{Name: userName, User: u}}
	k.doc.Contexts = []namedContext{{Name: "podhub", Context: kubeContext{Cluster: "podhub", User: userName}}}
}

func (k *kubeconfigFile) write() error {
	data, err := yaml.Marshal(k.doc)
	if err != nil {
		return err
	}
	if err := writeFileMode(k.path, data, 0o600); err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	return nil
}

// httpURL is the listener's URL from http.listen: this host's name when
// it listens on every interface.
func (c *cli) httpURL() (string, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return "", err
	}
	if cfg.HTTP.Listen == "" {
		return "", errors.New("podhub.yaml sets no http.listen: give the listener's URL with --server https://HOST:PORT")
	}
	host, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		return "", fmt.Errorf("http.listen %q: %w", cfg.HTTP.Listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", err
		}
	}
	return "https://" + net.JoinHostPort(host, port), nil
}

// Package grafana checks the Grafana dashboards of packaging/grafana
// against the tables both binaries write their /metrics from.
package grafana

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/sync/hub/hubmetrics"
)

// The dashboards in packaging/grafana and the tables their expressions
// are checked against: the fleet dashboard reads the hub's /metrics, the
// device dashboard a device's; each exposition is written from its table.
var dashboards = []struct {
	file     string
	families []metrics.Family
}{
	{"podvisor-fleet.json", hubmetrics.Families()},
	{"podvisor-device.json", devmetrics.Families},
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// Each dashboard is one Grafana imports: a schema of Grafana 9 or later,
// the Prometheus data source as an input (${DS_PROMETHEUS}) on every
// panel, query and variable, unique panel IDs on a 24-column grid; and
// every expression names only metrics and labels that the /metrics it
// reads writes, and shows every one of them.
func TestGrafanaDashboards(t *testing.T) {
	for _, d := range dashboards {
		t.Run(d.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "packaging", "grafana", d.file))
			if err != nil {
				t.Fatal(err)
			}
			var dash dashboard
			if err := json.Unmarshal(raw, &dash); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			checkDashboard(t, &dash)
			c := newExprChecker(d.families)
			for _, v := range dash.Templating.List {
				c.vars[v.Name] = true
			}
			for _, v := range dash.Templating.List {
				if err := c.variable(v.Query.Query); err != nil {
					t.Errorf("variable %s: %v", v.Name, err)
				}
			}
			for _, p := range dash.allPanels() {
				for _, tg := range p.Targets {
					if err := c.target(tg.Expr, tg.LegendFormat); err != nil {
						t.Errorf("panel %q, query %s: %v", p.Title, tg.RefID, err)
					}
				}
			}
			for _, f := range d.families {
				if !c.used[f.Name] {
					t.Errorf("%s: written to /metrics, shown by no panel", f.Name)
				}
			}
		})
	}
}

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Inputs []struct {
		Name, Type, PluginID string
	} `json:"__inputs"`
	UID, Title    string
	SchemaVersion int
	Panels        []panel
	Templating    struct {
		List []struct {
			Name, Type string
			Datasource datasource
			Query      struct{ Query string }
		}
	}
}

type datasource struct{ Type, UID string }

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource *datasource
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Datasource   datasource
		Expr         string
		LegendFormat string
		RefID        string
	}
	Panels []panel // a collapsed row's
}

func (d *dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

const dsInput = "${DS_PROMETHEUS}"

func checkDashboard(t *testing.T, d *dashboard) {
	t.Helper()
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want 36 or later (Grafana 9+)", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both needed", d.UID, d.Title)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want the one Prometheus data source DS_PROMETHEUS", d.Inputs)
	}
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != (datasource{"prometheus", dsInput}) {
			t.Errorf("panel %q: datasource %+v, want the %s input", p.Title, p.Datasource, dsInput)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != (datasource{"prometheus", dsInput}) {
				t.Errorf("panel %q, query %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && v.Datasource != (datasource{"prometheus", dsInput}) {
			t.Errorf("variable %s: datasource %+v", v.Name, v.Datasource)
		}
	}
}

// exprChecker checks PromQL expressions against a table of families,
// by a small lexer of the PromQL the dashboards use (no PromQL parser:
// Prometheus' would be a large dependency for one test).
type exprChecker struct {
	samples map[string]metrics.Family // sample name → its family
	vars    map[string]bool           // the dashboard's variables
	used    map[string]bool           // families named so far
}

func newExprChecker(fams []metrics.Family) *exprChecker {
	c := &exprChecker{samples: map[string]metrics.Family{}, vars: map[string]bool{}, used: map[string]bool{}}
	for _, f := range fams {
		if f.Type == metrics.Histogram {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				g := f
				if suffix == "_bucket" {
					g.Labels = append(slices.Clone(f.Labels), "le")
				}
				c.samples[f.Name+suffix] = g
			}
			continue
		}
		c.samples[f.Name] = f
	}
	return c
}

var (
	grafanaVar  = regexp.MustCompile(`\$\{?(\w+)\}?`)
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"_"\s*$`)
	grouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	token       = regexp.MustCompile(`[0-9][0-9a-zA-Z.]*|[a-zA-Z_:][a-zA-Z0-9_:]*|\S`)
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelValues = regexp.MustCompile(`^label_values\((?:(.*),)?\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
)

// Grafana's own variables the expressions may use.
var grafanaBuiltins = []string{"__rate_interval", "__interval", "__range", "__range_s"}

var promqlFunctions = strings.Fields(`abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min
	count_over_time day_of_month day_of_week days_in_month delta deriv exp floor histogram_quantile hour idelta
	increase irate label_join label_replace last_over_time ln log10 log2 max_over_time min_over_time minute month
	predict_linear present_over_time quantile_over_time rate resets round scalar sgn sort sort_desc sqrt
	stddev_over_time stdvar_over_time sum_over_time time timestamp vector year
	sum min max avg group stddev stdvar count count_values bottomk topk quantile`)

var promqlKeywords = strings.Fields(`by without on ignoring group_left group_right bool and or unless offset inf nan`)

// target checks one query and its legend.
func (c *exprChecker) target(expr, legend string) error {
	named, err := c.expr(expr)
	if err != nil {
		return err
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		if !c.hasLabel(named, m[1]) {
			return fmt.Errorf("legend %q: label %s is on none of %v", legend, m[1], named)
		}
	}
	return nil
}

// variable checks a variable's query: label_values(expr, label) or
// label_values(label).
func (c *exprChecker) variable(q string) error {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return fmt.Errorf("query %q: want label_values(METRIC, LABEL)", q)
	}
	if m[1] == "" {
		return fmt.Errorf("query %q: label_values without a metric reads every series of the data source", q)
	}
	named, err := c.expr(m[1])
	if err != nil {
		return err
	}
	if !c.hasLabel(named, m[2]) {
		return fmt.Errorf("query %q: label %s is on none of %v", q, m[2], named)
	}
	return nil
}

// expr checks an expression and returns the sample names it reads.
func (c *exprChecker) expr(expr string) ([]string, error) {
	for _, m := range grafanaVar.FindAllStringSubmatch(expr, -1) {
		if !c.vars[m[1]] && !slices.Contains(grafanaBuiltins, m[1]) {
			return nil, fmt.Errorf("%q: $%s is no variable of the dashboard", expr, m[1])
		}
	}
	e := stringLit.ReplaceAllString(expr, `"_"`)
	e = rangeSel.ReplaceAllString(e, "")
	var named []string
	var err error
	e = selector.ReplaceAllStringFunc(e, func(sel string) string {
		m := selector.FindStringSubmatch(sel)
		f, ok := c.samples[m[1]]
		if !ok {
			err = fmt.Errorf("%q: selector %q names no metric the table has", expr, sel)
			return ""
		}
		for _, part := range strings.Split(m[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			lm := matcher.FindStringSubmatch(part)
			if lm == nil {
				err = fmt.Errorf("%q: matcher %q not understood", expr, part)
				return ""
			}
			if !slices.Contains(f.Labels, lm[1]) && !slices.Contains(targetLabels, lm[1]) {
				err = fmt.Errorf("%q: %s has no label %s (it has %v)", expr, m[1], lm[1], f.Labels)
			}
		}
		return m[1]
	})
	if err != nil {
		return nil, err
	}
	var groupLabels []string
	e = grouping.ReplaceAllStringFunc(e, func(g string) string {
		for _, l := range strings.Split(grouping.FindStringSubmatch(g)[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				groupLabels = append(groupLabels, l)
			}
		}
		return " "
	})
	toks := token.FindAllStringIndex(e, -1)
	for i, span := range toks {
		tok := e[span[0]:span[1]]
		if !(tok[0] == '_' || tok[0] == ':' || tok[0] >= 'a' && tok[0] <= 'z' || tok[0] >= 'A' && tok[0] <= 'Z') {
			continue
		}
		call := i+1 < len(toks) && e[toks[i+1][0]:toks[i+1][1]] == "("
		switch {
		case call:
			if !slices.Contains(promqlFunctions, tok) {
				return nil, fmt.Errorf("%q: %s( is no PromQL function", expr, tok)
			}
		case slices.Contains(promqlKeywords, tok):
		default:
			if _, ok := c.samples[tok]; !ok {
				return nil, fmt.Errorf("%q: %s is no metric the table has", expr, tok)
			}
			named = append(named, tok)
		}
	}
	if len(named) == 0 {
		return nil, fmt.Errorf("%q reads no metric", expr)
	}
	for _, l := range groupLabels {
		if !c.hasLabel(named, l) {
			return nil, fmt.Errorf("%q: groups by %s, a label of none of %v", expr, l, named)
		}
	}
	for _, n := range named {
		c.used[c.samples[n].Name] = true
	}
	return named, nil
}

// hasLabel says whether one of the samples has the label.
func (c *exprChecker) hasLabel(samples []string, label string) bool {
	if slices.Contains(targetLabels, label) {
		return true
	}
	for _, s := range samples {
		if slices.Contains(c.samples[s].Labels, label) {
			return true
		}
	}
	return false
}

// The checker itself refuses what it is there to catch.
func TestExprCheckerRefuses(t *testing.T) {
	c := newExprChecker(append(hubmetrics.Families(), devmetrics.Families...))
	c.vars["device"] = true
	for expr, why := range map[string]string{
		`podhub_devicez`:                                                    "unknown metric",
		`podhub_devices{phase="x"}`:                                         "unknown label",
		`sum by (phase) (podhub_devices)`:                                   "grouping by an unknown label",
		`rate(podhub_devices[$__rate_interval])`:                            "",
		`ratez(podhub_devices[5m])`:                                         "unknown function",
		`podhub_devices{device=~"$nodevice"}`:                               "unknown variable",
		`{__name__="podhub_devices"}`:                                       "selector without a name",
		`sum by (le) (rate(kubelet_pod_start_duration_seconds_bucket[5m]))`: "",
		`kubelet_pod_start_duration_seconds`:                                "a histogram's family name is no sample",
		`1 + 2`:                                                             "no metric",
		`podhub_device_running_pods{device=~"$device"} > 0`:                 "",
	} {
		_, err := c.expr(expr)
		if (err == nil) != (why == "") {
			t.Errorf("%s: error %v, want one: %t (%s)", expr, err, why != "", why)
		}
	}
	if err := c.target(`podhub_devices`, `{{phase}}`); err == nil {
		t.Errorf("a legend of an unknown label passed")
	}
	if got := slices.Sorted(maps.Keys(c.used)); len(got) == 0 {
		t.Errorf("no family counted as used")
	}
}

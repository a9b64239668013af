package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// nodeLabelCommand sets and removes a node's labels. Its removals are
// written -key, which a flag parser would read as shorthand flags, so the
// command parses its own line: words that start with "--" (and -h) are
// flags, every other word is the node or a label.
func (a *app) nodeLabelCommand() *cobra.Command {
	var replace, asJSON bool
	cmd := &cobra.Command{
		Use:   "label NODE key=value ... [-key ...] [--replace]",
		Short: "Set, change or remove a node's labels (compute:nodes:admin); prints the node",
		Long: `label calls nodes.setLabels. key=value sets a label (or changes its value);
-key (or key-, as kubectl writes it) removes one; --replace makes the labels
given the node's whole set (with none, it removes every label). A key is up
to 63 characters [A-Za-z0-9._-] starting and ending with a letter or digit,
optionally after a DNS-style prefix and a slash (site.example/rack); a value
is the same, or empty. Fleet runs (runs create --selector) and nodes list
--selector choose nodes by their labels.`,
		Example: `  better-compute nodes label node_0412 gpu=h200 rack=r1
  better-compute nodes label node_0412 -rack
  better-compute nodes label node_0412 gpu=h200 --replace`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			flags, words := splitFlagWords(cmd, args)
			cmd.DisableFlagParsing = false
			err := cmd.ParseFlags(flags)
			cmd.DisableFlagParsing = true
			if err != nil {
				return usageErr("%v", err)
			}
			if help, _ := cmd.Flags().GetBool("help"); help {
				return cmd.Help()
			}
			node, set, remove, err := parseLabelArgs(words)
			if err != nil {
				return usageErr("%v", err)
			}
			conn, err := a.connect(cmd)
			if err != nil {
				return err
			}
			if a.settings.Tenant == "" {
				return usageErr("no tenant: give --tenant, set BC_TENANT, or set tenant in the config file")
			}
			n, err := apiv1.NewNodesClient(conn).SetLabels(cmd.Context(), &apiv1.SetNodeLabelsRequest{TenantId: a.settings.Tenant, NodeId: node,
				Labels: set, Remove: remove, Replace: replace})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(n)
			}
			return a.nodeTable(n)
		},
	}
	cmd.Flags().BoolVar(&replace, "replace", false, "make the labels given the node's whole label set")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// splitFlagWords separates a command line's flags (--name, --name=value,
// --name value for a flag that takes one, -h) from its other words. After
// "--" every word is a word.
func splitFlagWords(cmd *cobra.Command, args []string) (flags, words []string) {
	for i := 0; i < len(args); i++ {
		s := args[i]
		switch {
		case s == "--":
			return flags, append(words, args[i+1:]...)
		case s == "-h":
			flags = append(flags, s)
		case strings.HasPrefix(s, "--"):
			flags = append(flags, s)
			name := strings.TrimPrefix(s, "--")
			if strings.Contains(name, "=") {
				continue
			}
			f := cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
			if f != nil && f.NoOptDefVal == "" && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			words = append(words, s)
		}
	}
	return flags, words
}

// parseLabelArgs reads nodes label's words: the node, then key=value to
// set, -key or key- to remove. Keys and values are checked by the server,
// whose message names the grammar; here only the shape of each word.
func parseLabelArgs(words []string) (node string, set map[string]string, remove []string, err error) {
	if len(words) == 0 || words[0] == "" || strings.HasPrefix(words[0], "-") || strings.Contains(words[0], "=") {
		return "", nil, nil, fmt.Errorf("nodes label: the first argument is the node id (nodes label NODE key=value ... -key ...)")
	}
	node = words[0]
	set = map[string]string{}
	for _, w := range words[1:] {
		switch {
		case strings.HasPrefix(w, "-"):
			key := strings.TrimPrefix(w, "-")
			if key == "" || strings.Contains(key, "=") {
				return "", nil, nil, fmt.Errorf("argument %q: -key removes a label and takes no value", w)
			}
			remove = append(remove, key)
		case strings.Contains(w, "="):
			key, value, _ := strings.Cut(w, "=")
			if prev, ok := set[key]; ok && prev != value {
				return "", nil, nil, fmt.Errorf("label %q is given twice (%q and %q)", key, prev, value)
			}
			set[key] = value
		case strings.HasSuffix(w, "-") && len(w) > 1:
			remove = append(remove, strings.TrimSuffix(w, "-"))
		default:
			return "", nil, nil, fmt.Errorf("argument %q: want key=value to set a label, -key or key- to remove one", w)
		}
	}
	return node, set, remove, nil
}

// labelsText is a node's labels as key=value, by key, "-" for none.
func labelsText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

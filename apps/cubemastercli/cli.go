package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
)

// run executes one command line in-process and returns the exit code.
// run executes one command line with no input (tests).
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, strings.NewReader(""), stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "cubemastercli: "+oneLine(err.Error()))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return exitFailed
	}
	return 0
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// app holds the global flags and the output streams.
type app struct {
	address string
	port    int
	timeout time.Duration
	out     io.Writer
	// creds are the credential flags, resolved into cred before a command
	// runs.
	creds credentialFlags
	cred  credentials
}

func (a *app) client() (*client, error) {
	c, err := newClient(a.address, a.port, a.timeout)
	if err != nil {
		return nil, err
	}
	c.cred = a.cred
	return c, nil
}

func newRootCmd(stdout io.Writer) *cobra.Command {
	a := &app{out: stdout}
	root := cmdutil.Root("cubemastercli", "Operate the cubemaster template API")
	pf := root.PersistentFlags()
	pf.StringVarP(&a.address, "address", "a", "127.0.0.1", "comma-separated master hosts; one is picked at random")
	pf.IntVarP(&a.port, "port", "p", 8089, "master port")
	pf.DurationVar(&a.timeout, "timeout", 35*time.Second, "timeout of each HTTP request")
	a.creds.register(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.creds.resolve(cmd)
		a.cred = c
		return err
	}

	root.AddCommand(a.tplCmd(), cubeboxCmd(a.tplCmd()))
	return root
}

// tplCmd is the template command group, also spelled `template`, as
// upstream does; it is registered at the top level and under cubebox.
func (a *app) tplCmd() *cobra.Command {
	tpl := &cobra.Command{Use: "tpl", Aliases: []string{"template"}, Short: "Manage templates (ids and aliases are accepted wherever a template is named)"}
	cmdutil.Group(tpl)
	naming := []*cobra.Command{a.statusCmd(), a.redoCmd(), a.mergeCmd(), a.infoCmd(), a.aliasCmd(), a.setAliasCmd(), a.deleteCmd(),
		a.buildStatusCmd(), a.buildWatchCmd()}
	for _, c := range naming {
		a.completeTemplates(c)
	}
	tpl.AddCommand(naming...)
	tpl.AddCommand(a.createFromImageCmd(), a.watchCmd(), a.listCmd(), a.renderCmd())
	return tpl
}

// completeTemplates makes shell completion offer the master's template ids
// and aliases for a command's TEMPLATE argument and its --template-id.
func (a *app) completeTemplates(cmd *cobra.Command) {
	complete := func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && cmd.Flags().Lookup("template-id") == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.templateCompletions(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
	}
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return complete(cmd, args, prefix)
	}
	if cmd.Flags().Lookup("template-id") != nil {
		_ = cmd.RegisterFlagCompletionFunc("template-id", complete)
	}
}

// templateCompletions lists the template ids and aliases starting with
// prefix, each with its status; nothing when the master cannot be asked
// (completion must never block or print errors).
func (a *app) templateCompletions(cmd *cobra.Command, prefix string) []cobra.Completion {
	cred, err := a.creds.resolve(cmd)
	if err != nil {
		return nil
	}
	a.cred = cred
	c, err := a.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	var resp cubeview.ListResponse
	if _, err := c.do(ctx, http.MethodGet, pathTemplate, nil, nil, &resp); err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, t := range resp.Data {
		if strings.HasPrefix(t.TemplateID, prefix) {
			out = append(out, cobra.CompletionWithDesc(t.TemplateID, strings.TrimSpace(t.Status+" "+t.Alias)))
		}
		if t.Alias != "" && strings.HasPrefix(t.Alias, prefix) {
			out = append(out, cobra.CompletionWithDesc(t.Alias, "alias of "+t.TemplateID))
		}
	}
	return out
}

// printLine prints a raw response as one compact line (the stream of
// updates --json gives while following a job).
func (a *app) printLine(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(raw))
	}
	buf.WriteByte('\n')
	_, err := a.out.Write(buf.Bytes())
	return err
}

// printJSON pretty-prints a raw response.
func (a *app) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = a.out.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := a.out.Write(buf.Bytes())
	return err
}

// stdoutIsTerminal decides between the live line and plain lines; tests
// replace it.
var stdoutIsTerminal = isTerminal

// isTerminal reports whether w is a character device (a TTY).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && fileIsTerminal(f)
}

func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && fileIsTerminal(f)
}

// fileIsTerminal asks the terminal driver: /dev/null is a character
// device too, but not a terminal.
func fileIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func requireFlag(name, value string) error {
	if strings.TrimSpace(value) == "" {
		return fmt.Errorf("--%s is required", name)
	}
	return nil
}

func newRequestID() string { return uuid.NewString() }

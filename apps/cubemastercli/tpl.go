package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/spf13/cobra"
)

const (
	pathTemplate  = "/cube/template"
	pathFromImage = "/cube/template/from-image"
	pathRedo      = "/cube/template/redo"
	pathMigrate   = "/cube/template/migrate"
)

// waitFlags are shared by the commands that submit a job.
type waitFlags struct {
	detach   bool
	interval time.Duration
	json     bool
}

func (w *waitFlags) register(cmd *cobra.Command, detach bool) {
	if detach {
		cmd.Flags().BoolVar(&w.detach, "detach", false, "return after submission instead of waiting")
		cmd.Flags().BoolVar(&w.detach, "no-wait", false, "same as --detach")
	}
	cmd.Flags().DurationVar(&w.interval, "interval", 2*time.Second, "polling interval")
	cmd.Flags().BoolVar(&w.json, "json", false, "print the responses as JSON: one object per line, one per update while waiting")
}

// submitted handles a freshly created job: prints it when detached, else
// follows it through pollPath until it ends.
func (a *app) submitted(cmd *cobra.Command, c *client, raw []byte, job *cubeview.JobInfo, pollPath string, w waitFlags) error {
	if job == nil || job.JobID == "" {
		return fmt.Errorf("the master answered without a job")
	}
	if w.detach {
		if w.json {
			return a.printJSON(raw)
		}
		printJob(a.out, job)
		return nil
	}
	return a.follow(cmd.Context(), c, pollPath, job.JobID, job, w)
}

func (a *app) createFromImageCmd() *cobra.Command {
	var (
		req   cubeview.FromImageRequest
		ports []int32
		w     waitFlags
		extra fromImageFlags
	)
	cmd := &cobra.Command{
		Use:   "create-from-image",
		Short: "Build a template from an OCI image and distribute it (waits by default)",
		// Upstream accepts "--allow-internet-access false" with a space.
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("image", req.SourceImageRef); err != nil {
				return err
			}
			if err := requireFlag("writable-layer-size", req.WritableLayerSize); err != nil {
				return err
			}
			req.RequestID = newRequestID()
			req.ExposedPorts = ports
			if err := extra.apply(cmd, args, &req, cmd.InOrStdin()); err != nil {
				return err
			}
			envd, err := extra.envdUpload()
			if err != nil {
				return err
			}
			var body any = req
			if envd != nil {
				if body, err = uploadForm(&req, envd); err != nil {
					return err
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var resp cubeview.JobResponse
			raw, err := c.do(cmd.Context(), http.MethodPost, pathFromImage, nil, body, &resp)
			if err != nil {
				return err
			}
			return a.submitted(cmd, c, raw, resp.Job, pathFromImage, w)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.SourceImageRef, "image", "", "source image reference (required)")
	f.StringVar(&req.WritableLayerSize, "writable-layer-size", "", "writable layer size, e.g. 20Gi (required)")
	f.StringVar(&req.TemplateID, "template-id", "", "template id (generated when empty)")
	f.StringVar(&req.InstanceType, "instance-type", "cubebox", "instance type")
	f.StringVar(&req.NetworkType, "network-type", "tap", "network type")
	f.StringArrayVar(&req.DistributionScope, "node", nil, "target node id or IP (repeatable; default all nodes)")
	f.Int32SliceVar(&ports, "expose-port", nil, "port to expose (repeatable)")
	f.StringVar(&req.RegistryUsername, "registry-username", "", "registry user (password: $CUBE_REGISTRY_PASSWORD, --registry-password-stdin or a prompt)")
	f.StringVar(&req.Alias, "alias", "", "alias to bind to the template")
	f.StringVar(&req.Backend, "backend", "", "copy-on-write backend of the template and its sandboxes: xfs or s3 (default: the node's, xfs)")
	extra.register(cmd)
	w.register(cmd, true)
	return cmd
}

func (a *app) statusCmd() *cobra.Command {
	var jobID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status JOB_ID|TEMPLATE",
		Short: "Show a create-from-image or redo job; a template id or alias shows its latest job",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			jobID, err := idArg(args, jobID, "job-id", "JOB_ID")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var resp cubeview.JobResponse
			raw, err := c.do(cmd.Context(), http.MethodGet, pathFromImage, url.Values{"job_id": {jobID}}, nil, &resp)
			if isNotFound(err) {
				// Not a job id: perhaps a template (or its alias).
				var terr error
				raw, terr = c.do(cmd.Context(), http.MethodGet, pathFromImage, url.Values{"template_id": {jobID}}, nil, &resp)
				if isNotFound(terr) {
					return fmt.Errorf("%s is neither a job id nor a template id or alias (ret_code 130404)", jobID)
				}
				err = terr
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			if resp.Job == nil {
				return fmt.Errorf("the master answered without a job")
			}
			printJob(a.out, resp.Job)
			return nil
		},
	}
	cmd.Flags().StringVar(&jobID, "job-id", "", "job id, or a template id or alias (same as the argument)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

// isNotFound reports a 130404 answer.
func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ret_code 130404")
}

func (a *app) watchCmd() *cobra.Command {
	var jobID string
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "watch JOB_ID",
		Short: "Follow a create-from-image or redo job until it ends",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			jobID, err := idArg(args, jobID, "job-id", "JOB_ID")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, pathFromImage, jobID, nil, w)
		},
	}
	cmd.Flags().StringVar(&jobID, "job-id", "", "job id (same as the argument)")
	w.register(cmd, false)
	return cmd
}

func (a *app) redoCmd() *cobra.Command {
	var req cubeview.RedoRequest
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "redo TEMPLATE",
		Short: "Redistribute a template to its nodes (waits by default); TEMPLATE is an id or alias",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := idArg(args, req.TemplateID, "template-id", "TEMPLATE")
			if err != nil {
				return err
			}
			req.RequestID = newRequestID()
			c, err := a.client()
			if err != nil {
				return err
			}
			if req.TemplateID, err = a.templateID(cmd.Context(), c, key); err != nil {
				return err
			}
			var resp cubeview.JobResponse
			raw, err := c.do(cmd.Context(), http.MethodPost, pathRedo, nil, req, &resp)
			if err != nil {
				return err
			}
			return a.submitted(cmd, c, raw, resp.Job, pathFromImage, w)
		},
	}
	cmd.Flags().StringVar(&req.TemplateID, "template-id", "", "template id or alias (same as the argument)")
	cmd.Flags().StringArrayVar(&req.DistributionScope, "node", nil, "node id or IP to redo (repeatable; default all)")
	cmd.Flags().BoolVar(&req.FailedOnly, "failed-only", false, "redo only replicas that failed")
	w.register(cmd, true)
	return cmd
}

func (a *app) mergeCmd() *cobra.Command {
	var req cubeview.MigrateRequest
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "merge TEMPLATE",
		Short: "Migrate a template's artifact to the shared store (waits by default); TEMPLATE is an id or alias",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := idArg(args, req.TemplateID, "template-id", "TEMPLATE")
			if err != nil {
				return err
			}
			req.RequestID = newRequestID()
			c, err := a.client()
			if err != nil {
				return err
			}
			if req.TemplateID, err = a.templateID(cmd.Context(), c, key); err != nil {
				return err
			}
			var resp cubeview.JobResponse
			raw, err := c.do(cmd.Context(), http.MethodPost, pathMigrate, nil, req, &resp)
			if err != nil {
				return err
			}
			return a.submitted(cmd, c, raw, resp.Job, pathMigrate, w)
		},
	}
	cmd.Flags().StringVar(&req.TemplateID, "template-id", "", "template id or alias (same as the argument)")
	cmd.Flags().StringVar(&req.Backend, "backend", "", "target store kind, e.g. s3 (default: the master's)")
	w.register(cmd, true)
	return cmd
}

func (a *app) listCmd() *cobra.Command {
	var output string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List templates",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "wide" {
				return fmt.Errorf("-o/--output: %q is not supported (only \"wide\")", output)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var resp cubeview.ListResponse
			raw, err := c.do(cmd.Context(), http.MethodGet, pathTemplate, nil, nil, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			// Upstream's newest columns; wide adds LAST_ERROR, as its does,
			// and the instance type and version.
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			wide := output == "wide"
			if wide {
				fmt.Fprintln(tw, "TEMPLATE_ID\tALIAS\tSTATUS\tBACKEND\tJOB_ID\tLAST_ERROR\tCREATED_AT\tIMAGE_INFO\tINSTANCE_TYPE\tVERSION")
			} else {
				fmt.Fprintln(tw, "TEMPLATE_ID\tALIAS\tSTATUS\tBACKEND\tJOB_ID\tCREATED_AT\tIMAGE_INFO")
			}
			for _, t := range resp.Data {
				alias, backend := firstOf(t.DisplayName, t.Alias), firstOf(t.Backend, t.StorageBackend)
				if wide {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TemplateID, dash(alias), dash(t.Status), dash(backend),
						dash(t.JobID), dash(oneLine(t.LastError)), dash(t.CreatedAt), dash(t.ImageInfo), dash(t.InstanceType), dash(t.Version))
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TemplateID, dash(alias), dash(t.Status), dash(backend),
						dash(t.JobID), dash(t.CreatedAt), dash(t.ImageInfo))
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

func (a *app) infoCmd() *cobra.Command {
	var id string
	var includeRequest, asJSON bool
	cmd := &cobra.Command{
		Use:   "info TEMPLATE",
		Short: "Show one template and its replicas; TEMPLATE is an id or alias",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := idArg(args, id, "template-id", "TEMPLATE")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			id, err := a.templateID(cmd.Context(), c, key)
			if err != nil {
				return err
			}
			q := url.Values{"template_id": {id}}
			if includeRequest {
				q.Set("include_request", "true")
			}
			var resp cubeview.TemplateResponse
			raw, err := c.do(cmd.Context(), http.MethodGet, pathTemplate, q, nil, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			printTemplate(a.out, &resp)
			if includeRequest && resp.CreateRequest != nil {
				fmt.Fprintln(a.out, "create_request:")
				return a.printJSON(mustJSON(resp.CreateRequest))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "template-id", "", "template id (required)")
	cmd.Flags().BoolVar(&includeRequest, "include-request", false, "also print the stored sandbox create request")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

func (a *app) aliasCmd() *cobra.Command {
	var id, alias string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "alias TEMPLATE [ALIAS]",
		Short: "Set a template's alias, taking it from the template that holds it when this one is READY (no ALIAS, or an empty --alias, clears it); TEMPLATE is an id or alias",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := idArg(args[:min(len(args), 1)], id, "template-id", "TEMPLATE")
			if err != nil {
				return err
			}
			if len(args) == 2 {
				alias = args[1]
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			id, err := a.templateID(cmd.Context(), c, key)
			if err != nil {
				return err
			}
			path := pathTemplate + "/" + url.PathEscape(id) + "/alias"
			trimmed := strings.TrimSpace(alias)
			raw, err := c.do(cmd.Context(), http.MethodPut, path, nil, cubeview.AliasRequest{RequestID: newRequestID(), Alias: &trimmed}, nil)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			if strings.TrimSpace(alias) == "" {
				fmt.Fprintf(a.out, "alias of %s cleared\n", id)
			} else {
				fmt.Fprintf(a.out, "alias of %s set to %s\n", id, strings.TrimSpace(alias))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "template-id", "", "template id or alias (same as the first argument)")
	cmd.Flags().StringVar(&alias, "alias", "", "alias; empty clears it (same as the second argument)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

// setAliasCmd is upstream's `tpl set-alias TEMPLATE --alias A | --clear`:
// the alias moves to TEMPLATE (which must be READY) from whichever
// template held it; --clear removes TEMPLATE's alias.
func (a *app) setAliasCmd() *cobra.Command {
	var id, alias string
	var clear, asJSON bool
	cmd := &cobra.Command{
		Use:   "set-alias TEMPLATE (--alias ALIAS | --clear)",
		Short: "Give a template an alias, taking it from the template that holds it, or clear its alias; TEMPLATE is an id or alias",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := idArg(args, id, "template-id", "TEMPLATE")
			if err != nil {
				return err
			}
			if !clear && !cmd.Flags().Changed("alias") {
				return fmt.Errorf("give --alias ALIAS or --clear")
			}
			if clear {
				alias = ""
			}
			alias = strings.TrimSpace(alias)
			c, err := a.client()
			if err != nil {
				return err
			}
			// The master resolves an alias in the path itself.
			path := pathTemplate + "/" + url.PathEscape(key) + "/alias"
			var resp cubeview.TemplateResponse
			raw, err := c.do(cmd.Context(), http.MethodPut, path, nil, cubeview.AliasRequest{RequestID: newRequestID(), Alias: &alias}, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			printTemplate(a.out, &resp)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "template-id", "", "template id or alias (same as the argument)")
	cmd.Flags().StringVar(&alias, "alias", "", "the alias; it moves here from the template that holds it; empty clears")
	cmd.Flags().BoolVar(&clear, "clear", false, "clear the template's alias (wins over --alias)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

func (a *app) deleteCmd() *cobra.Command {
	var id string
	var asJSON, yes bool
	cmd := &cobra.Command{
		Use:   "delete TEMPLATE [TEMPLATE...]",
		Short: "Delete templates from every node and the stores (asks first on a terminal); TEMPLATE is an id or alias",
		RunE: func(cmd *cobra.Command, args []string) error {
			keys := args
			if len(keys) == 0 || id != "" {
				key, err := idArg(args[:min(len(args), 1)], id, "template-id", "TEMPLATE")
				if err != nil {
					return err
				}
				keys = append([]string{key}, args[min(len(args), 1):]...)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			// Each is deleted on its own; a failure does not stop the
			// others, and the command fails naming every one that failed.
			var failed []error
			for _, key := range keys {
				if err := a.deleteOne(cmd, c, key, yes, asJSON); err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", key, err))
				}
			}
			return errors.Join(failed...)
		},
	}
	cmd.Flags().StringVar(&id, "template-id", "", "template id or alias (same as the first argument)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

func (a *app) buildStatusCmd() *cobra.Command {
	var id string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "build-status BUILD_ID|TEMPLATE",
		Short: "Show a build's status: BUILD_ID is the job_id create-from-image, status and redo print; a template id or alias shows its last job",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg(args, id, "build-id", "BUILD_ID")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var resp cubeview.BuildStatus
			raw, _, err := a.buildStatus(cmd.Context(), c, id, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			kv(a.out, "build_id", resp.BuildID)
			kv(a.out, "template_id", resp.TemplateID)
			kv(a.out, "attempt_no", fmt.Sprint(resp.AttemptNo))
			kv(a.out, "retry_of_job_id", resp.RetryOfJobID)
			// The API says building/ready/error, as upstream's; printed in
			// capitals like every other status this CLI shows.
			kv(a.out, "status", strings.ToUpper(resp.Status))
			kv(a.out, "progress", fmt.Sprintf("%d%%", resp.Progress))
			kv(a.out, "message", resp.Message)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "build-id", "", "build (job) id (same as the argument)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

// buildStatus reads a build's status; id is a build (job) id, or a template
// id or alias, which names the template's last job. job is the build id
// read.
func (a *app) buildStatus(ctx context.Context, c *client, id string, resp *cubeview.BuildStatus) (raw []byte, job string, err error) {
	raw, err = c.do(ctx, http.MethodGet, pathTemplate+"/build/"+url.PathEscape(id)+"/status", nil, nil, resp)
	if isNotFound(err) {
		// Not a job id: perhaps a template (or its alias).
		tid, terr := a.templateID(ctx, c, id)
		if terr != nil {
			return nil, "", err
		}
		last, jerr := a.latestJob(ctx, c, tid)
		if jerr != nil {
			return nil, "", err
		}
		raw, err = c.do(ctx, http.MethodGet, pathTemplate+"/build/"+url.PathEscape(last)+"/status", nil, nil, resp)
		return raw, last, err
	}
	return raw, id, err
}

// deleteOne deletes the template key names, asking first on a terminal
// unless yes.
func (a *app) deleteOne(cmd *cobra.Command, c *client, key string, yes, asJSON bool) error {
	id, err := a.templateID(cmd.Context(), c, key)
	if err != nil {
		return err
	}
	if !yes && stdinIsTerminal(cmd.InOrStdin()) {
		q := fmt.Sprintf("Delete template %s from every node and the stores?", id)
		if id != key {
			q = fmt.Sprintf("Delete template %s (alias %s) from every node and the stores?", id, key)
		}
		if !confirm(cmd, q) {
			return fmt.Errorf("not deleted (pass --yes to skip the question)")
		}
	}
	raw, err := c.do(cmd.Context(), http.MethodDelete, pathTemplate, nil, cubeview.DeleteRequest{RequestID: newRequestID(), TemplateID: id}, nil)
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(raw)
	}
	fmt.Fprintf(a.out, "template deleted: %s\n", id)
	return nil
}

// firstOf is the first non-empty value.
func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

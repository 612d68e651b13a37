package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
)

// idArg returns the id a command names: its positional argument, else the
// legacy flag's value. Giving both (different) is an error.
func idArg(args []string, flagValue, flagName, what string) (string, error) {
	flagValue = strings.TrimSpace(flagValue)
	switch {
	case len(args) == 0 && flagValue == "":
		return "", fmt.Errorf("%s is required: give it as the first argument (or --%s)", what, flagName)
	case len(args) == 0:
		return flagValue, nil
	case flagValue != "" && flagValue != args[0]:
		return "", fmt.Errorf("%s given twice: %q and --%s %q", what, args[0], flagName, flagValue)
	}
	return strings.TrimSpace(args[0]), nil
}

// templateID turns a template id or alias into the template id: ids and
// aliases share one namespace, so an id wins and an alias names at most one
// template. A key that is neither is passed on as is (the master answers
// not found).
func (a *app) templateID(ctx context.Context, c *client, key string) (string, error) {
	var resp cubeview.ListResponse
	if _, err := c.do(ctx, http.MethodGet, pathTemplate, nil, nil, &resp); err != nil {
		return "", err
	}
	for _, t := range resp.Data {
		if t.TemplateID == key {
			return key, nil
		}
	}
	for _, t := range resp.Data {
		if t.Alias == key {
			return t.TemplateID, nil
		}
	}
	return key, nil
}

// latestJob returns the job id a template's replicas last ran, for
// build-status given a template.
func (a *app) latestJob(ctx context.Context, c *client, templateID string) (string, error) {
	var resp cubeview.TemplateResponse
	if _, err := c.do(ctx, http.MethodGet, pathTemplate, url.Values{"template_id": {templateID}}, nil, &resp); err != nil {
		return "", err
	}
	for _, r := range resp.Replicas {
		if r.LastJobID != "" {
			return r.LastJobID, nil
		}
	}
	return "", fmt.Errorf("template %s has no job on record", templateID)
}

// stdinIsTerminal decides whether delete asks first; tests replace it.
var stdinIsTerminal = func(r io.Reader) bool { return isTerminalReader(r) }

// confirm asks question on a terminal; anything but y/yes is a no.
func confirm(cmd *cobra.Command, question string) bool {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", question)
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

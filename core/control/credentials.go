package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
)

// registryAuth is what a job's sealed RegistryAuth holds.
type registryAuth struct {
	Username string `json:"u,omitempty"`
	Password string `json:"p,omitempty"`
}

// sealAuth seals req's registry credentials for the job row; "" when there
// are none or no Sealer is configured (then a redo that must rebuild a
// private image needs the credentials again).
func (s *Service) sealAuth(req *core.FromImageRequest) (string, error) {
	if s.Sealer == nil || (req.RegistryUsername == "" && req.RegistryPassword == "") {
		return "", nil
	}
	b, err := json.Marshal(registryAuth{Username: req.RegistryUsername, Password: req.RegistryPassword})
	if err != nil {
		return "", err
	}
	sealed, err := s.Sealer.Seal(b)
	if errors.Is(err, core.ErrUnsupported) {
		// No sealing key: the credentials are not kept (a redo that must
		// rebuild a private image asks for them again).
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("seal registry credentials: %w", err)
	}
	return sealed, nil
}

// ResealCredentials seals again, with the current key, the registry
// credentials of every job whose value was sealed with an older key or
// the legacy way (a key derived from the callback token, which a copy of
// the database together with that token opened). The master runs it when
// it starts. It visits the jobs of every template with a definition;
// values it cannot open are counted, left as they are and logged by job.
// A Sealer without a sealing key re-seals nothing: stale counts what it
// would.
func (s *Service) ResealCredentials(ctx context.Context) (resealed, stale, unreadable int, err error) {
	if s.Sealer == nil {
		return 0, 0, 0, nil
	}
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("list templates: %w", err)
	}
	for _, d := range defs {
		jobs, err := s.Store.Jobs().ListByTemplate(ctx, d.TemplateID)
		if err != nil {
			return resealed, stale, unreadable, fmt.Errorf("list jobs of template %s: %w", d.TemplateID, err)
		}
		for _, j := range jobs {
			old := j.RegistryAuth
			if old == "" || s.Sealer.Current(old) {
				continue
			}
			plain, err := s.Sealer.Open(old)
			if err != nil {
				unreadable++
				s.log().WarnContext(ctx, "registry credentials of a job cannot be opened to seal them again", "job_id", j.JobID, "template_id", j.TemplateID, "err", err)
				continue
			}
			sealed, err := s.Sealer.Seal(plain)
			if errors.Is(err, core.ErrUnsupported) {
				stale++
				continue
			}
			if err != nil {
				return resealed, stale, unreadable, fmt.Errorf("seal again the credentials of job %s: %w", j.JobID, err)
			}
			_, err = s.Store.Jobs().Update(ctx, j.JobID, func(cur *core.Job) error {
				if cur.RegistryAuth == old {
					cur.RegistryAuth = sealed
				}
				return nil
			})
			switch {
			case isNotFound(err):
			case err != nil:
				return resealed, stale, unreadable, fmt.Errorf("store the credentials of job %s sealed again: %w", j.JobID, err)
			default:
				resealed++
			}
		}
	}
	return resealed, stale, unreadable, nil
}

// openAuth returns the credentials sealed in a job's RegistryAuth; a value
// that cannot be opened (no Sealer, another key) is an error that says so
// without quoting it.
func (s *Service) openAuth(sealed string) (registryAuth, error) {
	var a registryAuth
	if sealed == "" {
		return a, nil
	}
	if s.Sealer == nil {
		return a, fmt.Errorf("the template's registry credentials are sealed but no sealer is configured: %w", core.ErrUnsupported)
	}
	b, err := s.Sealer.Open(sealed)
	if err != nil {
		return a, fmt.Errorf("open the template's registry credentials (sealed with another key?): %w", err)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("the template's sealed registry credentials are malformed: %w", core.ErrInvalidArgument)
	}
	return a, nil
}

// Package deploy holds no code: its tests check the deployment files next
// to it (systemd units, the Helm chart, the compose file) and the
// repository's Dockerfile, so a renamed variable or binary breaks the
// build instead of an installation. The chart is rendered with helm and
// validated against the Kubernetes schemas (kubeconform, on schemas
// vendored in testdata by internal/k8sschemas); the chart's pods and the
// compose services are run, as the image's user, over volumes presented as
// their platform presents them (sandbox_test.go).
package deploy

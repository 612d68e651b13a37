{{- define "ctc.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "ctc.labels" -}}
app.kubernetes.io/name: cubetemplatecenter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "ctc.tokenSecret" -}}{{ .Values.callbackToken.existingSecret | default (printf "%s-callback-token" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.nodeTokenSecret" -}}{{ .Values.nodeToken.existingSecret | default (printf "%s-node-token" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.sealingKeysSecret" -}}{{ .Values.sealingKeys.existingSecret | default (printf "%s-sealing-keys" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.apiTokenSecret" -}}{{ .Values.auth.existingSecret | default (printf "%s-api-token" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.s3Secret" -}}{{ .Values.s3.existingSecret | default (printf "%s-s3" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.dbSecret" -}}{{ .Values.database.existingSecret | default (printf "%s-database" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.claim" -}}{{ .Values.artifactStore.pvc.existingClaim | default (printf "%s-artifacts" (include "ctc.name" .)) }}{{- end -}}
{{- define "ctc.tcEndpoint" -}}{{ .Values.templateCenterEndpoint | default (printf "http://%s-templatecenter:%v" (include "ctc.name" .) .Values.templateCenter.port) }}{{- end -}}
{{- define "ctc.masterEndpoint" -}}{{ .Values.masterEndpoint | default (printf "http://%s-master:%v" (include "ctc.name" .) .Values.master.port) }}{{- end -}}

{{/* The validation of design §9.1: refuse what cannot run. */}}
{{- define "ctc.validate" -}}
{{- if and (not .Values.database.dsn) (not .Values.database.existingSecret) -}}
{{- fail "database.dsn (or database.existingSecret) is required: both services share one MySQL/MariaDB or PostgreSQL database, e.g. mysql://user:pass@tcp(host:3306)/cube" -}}
{{- end -}}
{{- if and (not .Values.artifactStore.s3Backed) (eq .Values.artifactStore.pvc.accessMode "ReadWriteOnce") (gt (int .Values.master.replicas) 1) -}}
{{- fail (printf "artifactStore.pvc.accessMode ReadWriteOnce with master.replicas=%v: a ReadWriteOnce claim attaches to one node, so the other replicas would stay Pending; use master.replicas=1, a ReadWriteMany claim, or artifactStore.s3Backed=true" .Values.master.replicas) -}}
{{- end -}}
{{- if and (eq .Values.templateCenter.builder "mkfs") (ne (toString .Values.podSecurityContext.runAsUser) "0") -}}
{{- fail "templateCenter.builder=mkfs needs root (mkfs.ext4 -d, debugfs), and the pods run as podSecurityContext.runAsUser; use ext4stream" -}}
{{- end -}}
{{- if .Values.artifactStore.s3Backed -}}
{{- range $k := list "endpoint" "bucket" -}}
{{- if not (index $.Values.s3 $k) -}}
{{- fail (printf "artifactStore.s3Backed=true needs s3.%s" $k) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.s3.existingSecret) (or (not .Values.s3.accessKey) (not .Values.s3.secretKey)) -}}
{{- fail "artifactStore.s3Backed=true needs s3.accessKey and s3.secretKey (or s3.existingSecret): both the master and the data plane get them" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Settings both services read. */}}
{{- define "ctc.commonEnv" -}}
- name: CUBE_TEMPLATE_CALLBACK_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "ctc.tokenSecret" . }}, key: token}}
- name: CUBE_TEMPLATE_CENTER_DB_DSN
  valueFrom: {secretKeyRef: {name: {{ include "ctc.dbSecret" . }}, key: dsn}}
- name: CUBE_TEMPLATE_CENTER_LOG_FORMAT
  value: json
{{- if .Values.artifactStore.s3Backed }}
- name: CUBE_S3_ENDPOINT
  value: {{ .Values.s3.endpoint | quote }}
- name: CUBE_S3_BUCKET
  value: {{ .Values.s3.bucket | quote }}
- name: CUBE_S3_REGION
  value: {{ .Values.s3.region | quote }}
- name: CUBE_S3_ARTIFACT_PREFIX
  value: {{ .Values.s3.prefix | quote }}
- name: CUBE_S3_USE_PATH_STYLE
  value: {{ .Values.s3.usePathStyle | quote }}
- name: CUBE_S3_USE_SSL
  value: {{ .Values.s3.useSSL | quote }}
- name: CUBE_S3_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ include "ctc.s3Secret" . }}, key: accessKey}}
- name: CUBE_S3_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ include "ctc.s3Secret" . }}, key: secretKey}}
{{- end }}
{{- end -}}

{{/* What every pod of the chart shares: its security context and the
     writable volumes a read-only root filesystem needs (state, /tmp). */}}
{{- define "ctc.podSecurity" -}}
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
{{- define "ctc.containerSecurity" -}}
securityContext: {{- toYaml .Values.securityContext | nindent 2 }}
{{- end -}}
{{- define "ctc.stateMounts" -}}
- {name: state, mountPath: /var/lib/cube}
- {name: tmp, mountPath: /tmp}
{{- end -}}
{{- define "ctc.stateVolumes" -}}
- name: state
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Degraded but allowed configurations (design §9.1): printed in the
     install notes and recorded on the master Deployment. */}}
{{- define "ctc.warnings" -}}
{{- if and (not .Values.artifactStore.s3Backed) (or (gt (int .Values.master.replicas) 1) (gt (int .Values.templateCenter.replicas) 1)) -}}
several replicas without S3 (artifactStore.s3Backed=false): the artifact store is node-local, so a download may reach a replica that never built the artifact and data plane replicas may build the same spec twice; set artifactStore.s3Backed=true for multi-replica
{{- end -}}
{{- end -}}

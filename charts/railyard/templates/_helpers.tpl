{{/*
Names. With the release named "railyard" (docs/install.md) every object has the name the
kustomize manifests give it: railyard-scheduler, railyard-extender, railyard-metrics, ...
*/}}
{{- define "railyard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "railyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* kube-scheduler's ServiceAccount, Deployment, PDB and leader-election Lease. */}}
{{- define "railyard.scheduler" -}}
{{- include "railyard.fullname" . }}-scheduler
{{- end -}}

{{/* The extender's ServiceAccount (less privileged than kube-scheduler's). */}}
{{- define "railyard.extenderServiceAccount" -}}
{{- include "railyard.fullname" . }}
{{- end -}}

{{/* The labels on every object: the manifests' part-of, and Helm's own. */}}
{{- define "railyard.labels" -}}
app.kubernetes.io/part-of: railyard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* What selects the scheduler pods (Deployment, PDB, metrics Service, anti-affinity). */}}
{{- define "railyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "railyard.name" . }}
app.kubernetes.io/component: scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "railyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The name kube-scheduler verifies in the sidecar's certificate (tlsConfig.serverName). */}}
{{- define "railyard.tlsServerName" -}}
{{- default (printf "%s-extender.%s.svc" (include "railyard.fullname" .) .Release.Namespace) .Values.tls.serverName -}}
{{- end -}}

{{/*
Combinations that mean nothing: main-scheduler installs only the extender's identity, so the
second scheduler's options would be silently ignored. Refuse them with the reason instead.
*/}}
{{- define "railyard.validate" -}}
{{- if eq .Values.mode "main-scheduler" -}}
{{- range $option, $on := dict "tls.enabled" .Values.tls.enabled "kueue.enabled" .Values.kueue.enabled "metrics.serviceMonitor.enabled" .Values.metrics.serviceMonitor.enabled -}}
{{- if $on -}}
{{- fail (printf "%s=true needs mode=second-scheduler: mode=main-scheduler installs only the extender's identity and RBAC, and your kube-scheduler's configuration is yours to edit (docs/install.md, Mode 2)" $option) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs metrics.enabled=true: the ServiceMonitor scrapes the metrics Service" -}}
{{- end -}}
{{- end -}}

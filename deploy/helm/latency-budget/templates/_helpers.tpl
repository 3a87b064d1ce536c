{{/* The objects' base name: the release name, plus -latency-budget unless it is in it. */}}
{{- define "lb.fullname" -}}
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

{{- define "lb.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "lb.selector" (list . "serve") */}}
{{- define "lb.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ default $root.Chart.Name $root.Values.nameOverride }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* serve's headless Service: the StatefulSet's serviceName and the resolver's service. */}}
{{- define "lb.serveService" -}}
{{- printf "%s-serve" (include "lb.fullname" .) -}}
{{- end -}}

{{- define "lb.budgetsConfigMap" -}}
{{- default (printf "%s-budgets" (include "lb.fullname" .)) .Values.serve.existingBudgetsConfigMap -}}
{{- end -}}

{{- define "lb.budgets" -}}
{{- default (.Files.Get "files/budgets.yaml") .Values.serve.budgets -}}
{{- end -}}

{{/* Where serve hands rootless parts back (--handover-endpoint): serve.handover.endpoint, else the
chart's Collector Service, on the port of serve's OTLP protocol (serve.nextHop.protocol). */}}
{{- define "lb.handover" -}}
{{- if .Values.serve.handover.endpoint -}}
{{- .Values.serve.handover.endpoint -}}
{{- else -}}
{{- $port := ternary 4317 4318 (eq .Values.serve.nextHop.protocol "grpc") -}}
{{- printf "http://%s-collector.%s.svc:%d" (include "lb.fullname" .) .Release.Namespace $port -}}
{{- end -}}
{{- end -}}

{{/* Where serve forwards: serve.nextHop.endpoint, else the bundled Jaeger. */}}
{{- define "lb.nextHop" -}}
{{- if .Values.serve.nextHop.endpoint -}}
{{- .Values.serve.nextHop.endpoint -}}
{{- else if .Values.jaeger.enabled -}}
{{- printf "http://%s-jaeger.%s.svc:4317" (include "lb.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- fail "serve.nextHop.endpoint is empty and jaeger.enabled is false: set where serve forwards the judged traces" -}}
{{- end -}}
{{- end -}}

{{- define "lb.serveImage" -}}
{{- printf "%s:%s" .Values.serve.image.repository (default .Chart.AppVersion .Values.serve.image.tag) -}}
{{- end -}}

{{/* The restricted Pod Security Standard: non-root, no privilege escalation, no capabilities, a read-only root. */}}
{{- define "lb.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Names, labels and images shared by the templates. */}}

{{- define "cohort.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; the operator's objects are "<fullname>-operator". */}}
{{- define "cohort.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cohort.operatorName" -}}
{{- printf "%s-operator" (include "cohort.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cohort.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "cohort.labels" -}}
helm.sh/chart: {{ include "cohort.chart" . }}
{{ include "cohort.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cohort
{{- end }}

{{- define "cohort.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cohort.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cohort.operatorSelectorLabels" -}}
{{ include "cohort.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator pods' selector labels as key=value,... (--operator-pod-labels). */}}
{{- define "cohort.operatorPodLabelList" -}}
{{- $pairs := list }}
{{- range $k, $v := include "cohort.operatorSelectorLabels" . | fromYaml }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* Cluster-scoped objects: one per release, so the release namespace is in the name. */}}
{{- define "cohort.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "cohort.operatorName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cohort.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cohort.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cohort.leaseName" -}}
{{- default (include "cohort.operatorName" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; call with (list $image $root). */}}
{{- define "cohort.image" -}}
{{- $image := index . 0 }}
{{- $root := index . 1 }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* The labels the monitors add, for kube-prometheus-stack's `release` selector. */}}
{{- define "cohort.monitorLabels" -}}
{{ include "cohort.labels" . }}
{{- with .Values.monitoring.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Monitoring needs the Prometheus Operator's CRDs. Fail with what to do, rather than leave
`helm install` with "no matches for kind ServiceMonitor".
*/}}
{{- define "cohort.requireMonitoringCRDs" -}}
{{- if not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}
{{- fail "monitoring.enabled=true needs the Prometheus Operator CRDs (monitoring.coreos.com/v1 ServiceMonitor and PodMonitor), which this cluster does not serve. Install kube-prometheus-stack or the prometheus-operator CRDs first, or set monitoring.enabled=false. (helm template: add --api-versions monitoring.coreos.com/v1.)" }}
{{- end }}
{{- end }}

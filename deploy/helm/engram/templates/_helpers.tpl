{{/* The deployables, in the order they start in: stores first, the gateway last. */}}
{{- define "engram.components" -}}
vector lexical graph scoring ingest consolidate gateway
{{- end }}

{{/* Components that serve gRPC to the others (a Service each); the workers only probe. */}}
{{- define "engram.servers" -}}
vector lexical graph scoring gateway
{{- end }}

{{- define "engram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "engram.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "engram.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "engram.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* A component's resource name: "<fullname>-<component>". Call with (list $ "vector"). */}}
{{- define "engram.component" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "engram.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "engram.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "engram.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "engram.labels" -}}
{{- $root := index . 0 -}}
{{ include "engram.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: engram
{{- end }}

{{- define "engram.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "engram.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "engram.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where another component's gRPC server is: its headless Service through DNS, so a
client's round-robin balancing sees every replica. */}}
{{- define "engram.addr" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- printf "dns:///%s.%s.svc:%v" (include "engram.component" (list $root $name)) $root.Release.Namespace (index $root.Values $name).port }}
{{- end }}

{{/* "true" when a component runs an embedded store (a volume, one replica). */}}
{{- define "engram.embedded" -}}
{{- $block := index (index . 0).Values (index . 1) }}
{{- if has ($block.backend | default "") (list "edge" "tantivy" "ladybug") }}true{{ end }}
{{- end }}

{{/* The gRPC service a server component serves, as its health service names it. */}}
{{- define "engram.grpcService" -}}
{{- $services := dict "gateway" "engram.gateway.v1.MemoryService" "vector" "engram.vector.v1.VectorService" "lexical" "engram.lexical.v1.LexicalService" "graph" "engram.graph.v1.GraphService" "scoring" "engram.scoring.v1.ScoringService" }}
{{- get $services . }}
{{- end }}

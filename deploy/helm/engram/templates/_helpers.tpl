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

{{/* Who calls a component's gRPC port inside the release; the gateway is called from
outside (networkPolicy.gatewayFrom) and the workers by nobody. */}}
{{- define "engram.callers" -}}
{{- $callers := dict "vector" "gateway ingest consolidate" "lexical" "gateway ingest consolidate" "graph" "gateway ingest consolidate" "scoring" "gateway" }}
{{- get $callers . }}
{{- end }}

{{/* The release's servers a component calls. */}}
{{- define "engram.callees" -}}
{{- $callees := dict "gateway" "vector lexical graph scoring" "ingest" "vector lexical graph" "consolidate" "vector lexical graph" }}
{{- get $callees . }}
{{- end }}

{{/* The TLS Secret a component mounts ("" when TLS is off). Call with (list $ "vector"). */}}
{{- define "engram.tlsSecret" -}}
{{- $root := index . 0 }}
{{- $block := index $root.Values (index . 1) }}
{{- if $root.Values.tls.enabled }}
{{- $own := dig "tls" "secretName" "" $block }}
{{- required "tls.secretName is required when tls.enabled is true" (default $root.Values.tls.secretName $own) }}
{{- end }}
{{- end }}

{{/* The name a component's certificate is checked against. */}}
{{- define "engram.tlsServerName" -}}
{{- $root := index . 0 }}
{{- default (printf "%s.%s.svc" (include "engram.component" (list $root (index . 1))) $root.Release.Namespace) $root.Values.tls.serverName }}
{{- end }}

{{/* A probe: the kubelet's gRPC probe, or with TLS on the health command with the CA (and
the client certificate under mTLS). Call with (list $ "vector" "health name"). */}}
{{- define "engram.probe" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $service := index . 2 }}
{{- $block := index $root.Values $name }}
{{- if include "engram.tlsSecret" (list $root $name) }}
{{- $t := $root.Values.tls }}
{{- $args := list "python" "-m" "engram_platform.health" "--ca" (printf "/etc/engram/tls/%s" $t.caKey) "--server-name" (include "engram.tlsServerName" (list $root $name)) }}
{{- if eq $t.clientAuth "require" }}
{{- $args = concat $args (list "--cert" (printf "/etc/engram/tls/%s" $t.certKey) "--key" (printf "/etc/engram/tls/%s" $t.keyKey)) }}
{{- end }}
{{- $args = append $args (printf "127.0.0.1:%v" $block.port) }}
{{- if $service }}{{ $args = append $args $service }}{{ end }}
exec:
  command: {{ toJson $args }}
timeoutSeconds: 5  # a Python start, then the call
{{- else }}
grpc:
  port: {{ $block.port }}
  {{- if $service }}
  service: {{ $service | quote }}
  {{- end }}
{{- end }}
{{- end }}

{{/* A component's metrics ports as JSON [[name, port], ...]: "metrics" on metrics.port, and
with workers > 1 "metrics-<i>" on metrics.port + i for each further worker process.
Call with (list $ "gateway"). */}}
{{- define "engram.metricsPorts" -}}
{{- $block := index (index . 0).Values (index . 1) }}
{{- $port := int $block.metrics.port }}
{{- $rows := list (list "metrics" $port) }}
{{- range $i := untilStep 1 (int (default 1 $block.workers)) 1 }}
{{- $rows = append $rows (list (printf "metrics-%d" $i) (add $port $i)) }}
{{- end }}
{{- toJson $rows }}
{{- end }}

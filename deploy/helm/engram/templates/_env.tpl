{{/* The environment of one component: its settings as ENGRAM_<COMPONENT>_* variables.
Call with (list $ "vector"). */}}
{{- define "engram.env" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $v := $root.Values }}
{{- $block := index $v $name }}
{{- $p := printf "ENGRAM_%s_" (upper $name) -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: HOME
  value: /tmp
- name: OTEL_RESOURCE_ATTRIBUTES
  value: "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),service.instance.id=$(POD_NAME)"
{{- if eq $v.tracing.exporter "otlp" }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ required "tracing.otlpEndpoint is required when tracing.exporter is otlp" $v.tracing.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_INSECURE
  value: {{ $v.tracing.otlpInsecure | quote }}
{{- end }}
- name: {{ $p }}HOST
  value: "0.0.0.0"
- name: {{ $p }}PORT
  value: {{ $block.port | quote }}
- name: {{ $p }}LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: {{ $p }}TRACING
  value: {{ $v.tracing.exporter | quote }}
{{- if hasKey $block "workers" }}
- name: {{ $p }}WORKERS
  value: {{ $block.workers | quote }}
{{- end }}
{{- if $v.metrics.enabled }}
- name: {{ $p }}METRICS__PORT
  value: {{ $block.metrics.port | quote }}
{{- end }}
{{- if include "engram.tlsSecret" (list $root $name) }}
{{- $t := $v.tls }}
- name: {{ $p }}TLS__CERT_FILE
  value: /etc/engram/tls/{{ $t.certKey }}
- name: {{ $p }}TLS__KEY_FILE
  value: /etc/engram/tls/{{ $t.keyKey }}
{{- if eq $t.clientAuth "require" }}
- name: {{ $p }}TLS__CA_FILE
  value: /etc/engram/tls/{{ $t.caKey }}
{{- end }}
- name: {{ $p }}TLS__CLIENT_AUTH
  value: {{ $t.clientAuth | quote }}
{{- if include "engram.callees" $name }}
- name: {{ $p }}CLIENT_TLS__CA_FILE
  value: /etc/engram/tls/{{ $t.caKey }}
{{- if eq $t.clientAuth "require" }}
- name: {{ $p }}CLIENT_TLS__CERT_FILE
  value: /etc/engram/tls/{{ $t.certKey }}
- name: {{ $p }}CLIENT_TLS__KEY_FILE
  value: /etc/engram/tls/{{ $t.keyKey }}
{{- end }}
{{- with $t.serverName }}
- name: {{ $p }}CLIENT_TLS__SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if has $name (splitList " " (include "engram.servers" $root)) }}
- name: {{ $p }}MAX_CONNECTION_AGE_S
  value: "300"
{{- end }}
{{- if include "engram.embedded" (list $root $name) }}
- name: {{ $p }}DATA_DIR
  value: /var/lib/engram
{{- end }}
{{- if has $name (list "gateway" "ingest" "consolidate") }}
- name: {{ $p }}NATS__URL
  value: {{ $v.nats.url | quote }}
- name: {{ $p }}NATS__STREAM_REPLICAS
  value: {{ $v.nats.streamReplicas | quote }}
{{- range $store := list "vector" "lexical" "graph" }}
- name: {{ $p }}{{ upper $store }}_ADDR
  value: {{ include "engram.addr" (list $root $store) | quote }}
{{- end }}
{{- end }}
{{- if eq $name "gateway" }}
- name: {{ $p }}SCORING_ADDR
  value: {{ include "engram.addr" (list $root "scoring") | quote }}
- name: {{ $p }}TOKENS_FILE
  value: /etc/engram/auth/{{ $v.auth.key }}
{{- end }}
{{- if has $name (list "gateway" "vector" "consolidate") }}
- name: {{ $p }}CACHE__BACKEND
  value: redis
- name: {{ $p }}CACHE__REDIS__URL
  value: {{ $v.redis.url | quote }}
{{- if $v.redis.passwordSecret.name }}
- name: {{ $p }}CACHE__REDIS__PASSWORD_FILE
  value: /etc/engram/redis/{{ $v.redis.passwordSecret.key }}
{{- end }}
{{- end }}
{{- if eq $name "vector" }}
- name: {{ $p }}BACKEND
  value: {{ $block.backend | quote }}
{{- if eq $block.backend "qdrant" }}
- name: {{ $p }}QDRANT__URL
  value: {{ $v.qdrant.url | quote }}
- name: {{ $p }}QDRANT__GRPC_PORT
  value: {{ $v.qdrant.grpcPort | quote }}
- name: {{ $p }}QDRANT__COLLECTION
  value: {{ $v.qdrant.collection | quote }}
{{- if $v.qdrant.apiKeySecret.name }}
- name: {{ $p }}QDRANT__API_KEY_FILE
  value: /etc/engram/qdrant/{{ $v.qdrant.apiKeySecret.key }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $name "lexical" }}
- name: {{ $p }}BACKEND
  value: {{ $block.backend | quote }}
{{- if eq $block.backend "opensearch" }}
- name: {{ $p }}OPENSEARCH__URL
  value: {{ $v.opensearch.url | quote }}
- name: {{ $p }}OPENSEARCH__VERIFY_CERTS
  value: {{ $v.opensearch.verifyCerts | quote }}
- name: {{ $p }}OPENSEARCH__NUMBER_OF_REPLICAS
  value: {{ $v.opensearch.numberOfReplicas | quote }}
- name: {{ $p }}OPENSEARCH__INDEX_PREFIX
  value: {{ $v.opensearch.indexPrefix | quote }}
{{- if $v.opensearch.username }}
- name: {{ $p }}OPENSEARCH__USERNAME
  value: {{ $v.opensearch.username | quote }}
{{- end }}
{{- if $v.opensearch.passwordSecret.name }}
- name: {{ $p }}OPENSEARCH__PASSWORD_FILE
  value: /etc/engram/opensearch/{{ $v.opensearch.passwordSecret.key }}
{{- end }}
{{- if $v.opensearch.caSecret.name }}
- name: {{ $p }}OPENSEARCH__CA_FILE
  value: /etc/engram/opensearch-ca/{{ $v.opensearch.caSecret.key }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $name "graph" }}
- name: {{ $p }}BACKEND
  value: {{ $block.backend | quote }}
{{- if eq $block.backend "neo4j" }}
- name: {{ $p }}NEO4J__URI
  value: {{ $v.neo4j.uri | quote }}
- name: {{ $p }}NEO4J__USER
  value: {{ $v.neo4j.user | quote }}
- name: {{ $p }}NEO4J__DATABASE
  value: {{ $v.neo4j.database | quote }}
{{- if $v.neo4j.passwordSecret.name }}
- name: {{ $p }}NEO4J__PASSWORD_FILE
  value: /etc/engram/neo4j/{{ $v.neo4j.passwordSecret.key }}
{{- end }}
{{- end }}
{{- end }}
{{- include "engram.settingsEnv" (list $p $block.settings) }}
{{- with $block.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The secrets a component reads, as (volume name, mount path, secret ref) rows. */}}
{{- define "engram.secretMounts" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $v := $root.Values }}
{{- $rows := list }}
{{- if eq $name "gateway" }}
{{- $rows = append $rows (list "auth" "/etc/engram/auth" (dict "name" (default (printf "%s-auth" (include "engram.fullname" $root)) $v.auth.existingSecret) "key" $v.auth.key)) }}
{{- end }}
{{- if has $name (list "gateway" "vector" "consolidate") }}
{{- $rows = append $rows (list "redis-password" "/etc/engram/redis" $v.redis.passwordSecret) }}
{{- end }}
{{- if and (eq $name "vector") (eq $v.vector.backend "qdrant") }}
{{- $rows = append $rows (list "qdrant-api-key" "/etc/engram/qdrant" $v.qdrant.apiKeySecret) }}
{{- end }}
{{- if and (eq $name "lexical") (eq $v.lexical.backend "opensearch") }}
{{- $rows = append $rows (list "opensearch-password" "/etc/engram/opensearch" $v.opensearch.passwordSecret) }}
{{- $rows = append $rows (list "opensearch-ca" "/etc/engram/opensearch-ca" $v.opensearch.caSecret) }}
{{- end }}
{{- if and (eq $name "graph") (eq $v.graph.backend "neo4j") }}
{{- $rows = append $rows (list "neo4j-password" "/etc/engram/neo4j" $v.neo4j.passwordSecret) }}
{{- end }}
{{- with include "engram.tlsSecret" (list $root $name) }}
{{- $rows = append $rows (list "tls" "/etc/engram/tls" (dict "name" . "keys" (list $v.tls.certKey $v.tls.keyKey $v.tls.caKey))) }}
{{- end }}
{{- toJson $rows }}
{{- end }}

{{/* A settings block as variables: a nested map's keys joined with __, as the services'
nested settings read them ({context: {seeds: 0}} -> <prefix>CONTEXT__SEEDS); lists as JSON.
Call with (list "ENGRAM_GATEWAY_" $block.settings). */}}
{{- define "engram.settingsEnv" -}}
{{- $prefix := index . 0 }}
{{- range $key, $value := index . 1 }}
{{- if kindIs "map" $value }}
{{- include "engram.settingsEnv" (list (printf "%s%s__" $prefix (upper $key)) $value) }}
{{- else }}
- name: {{ $prefix }}{{ upper $key }}
  value: {{ (kindIs "slice" $value | ternary (toJson $value) (toString $value)) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Expand the name of the chart.
*/}}
{{- define "pact-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name, truncated at 63 characters (the DNS label limit).
If the release name contains the chart name it is used as the full name.
*/}}
{{- define "pact-gateway.fullname" -}}
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

{{/*
Chart name and version, as used by the helm.sh/chart label.
*/}}
{{- define "pact-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespace of every resource.
*/}}
{{- define "pact-gateway.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "pact-gateway.labels" -}}
helm.sh/chart: {{ include "pact-gateway.chart" . }}
{{ include "pact-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: pact-gateway
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "pact-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pact-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Metadata annotations: commonAnnotations merged with a resource's own (the resource's win).
Call with (dict "annotations" .Values.x.annotations "context" $).
*/}}
{{- define "pact-gateway.annotations" -}}
{{- $annotations := merge (dict) (.annotations | default dict) (.context.Values.commonAnnotations | default dict) }}
{{- with $annotations }}
{{- printf "annotations:\n%s" (toYaml . | indent 2) }}
{{- end }}
{{- end }}

{{/*
Name of the ServiceAccount to use.
*/}}
{{- define "pact-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pact-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The gateway image: repository@digest when a digest is given, else repository:tag (tag defaults to appVersion).
*/}}
{{- define "pact-gateway.image" -}}
{{- $repository := required "pact-gateway: image.repository is not set, and no public image is published. Build the image from the repository's Dockerfile (docker build -t REGISTRY/pact-gateway:TAG .), push it (docker push REGISTRY/pact-gateway:TAG), then set image.repository=REGISTRY/pact-gateway (and image.tag=TAG)." .Values.image.repository }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/*
Effective ports: the gateway config's own setting when present, else the chart's container port.
*/}}
{{- define "pact-gateway.httpPort" -}}
{{- dig "listen" "port" .Values.containerPorts.http (.Values.config | default dict) | int }}
{{- end }}

{{- define "pact-gateway.metricsPort" -}}
{{- dig "metrics" "port" .Values.containerPorts.metrics (.Values.config | default dict) | int }}
{{- end }}

{{/*
The gateway's config.yaml: .Values.config verbatim, with listen.port and metrics.port filled in
from the container ports when unset so the gateway binds where the probes and Service look, and
listen.trusted_proxies from .Values.trustedProxies when unset and the Service is a ClusterIP one.
*/}}
{{- define "pact-gateway.config" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $listen := deepCopy (get $config "listen" | default dict) }}
{{- $_ := set $listen "port" (include "pact-gateway.httpPort" . | int) }}
{{- if and (not (hasKey $listen "trusted_proxies")) (eq .Values.service.type "ClusterIP") }}
{{- $_ = set $listen "trusted_proxies" (.Values.trustedProxies | default list) }}
{{- end }}
{{- $_ = set $config "listen" $listen }}
{{- $metrics := deepCopy (get $config "metrics" | default dict) }}
{{- $_ = set $metrics "port" (include "pact-gateway.metricsPort" . | int) }}
{{- $_ = set $config "metrics" $metrics }}
{{- toYaml $config }}
{{- end }}

{{/*
The container's lifecycle hooks, as YAML: .Values.lifecycle, plus a preStop sleep of
preStopSleepSeconds when it names no preStop of its own. The gateway stops accepting the moment
SIGTERM arrives; the pause keeps it serving while endpoints drain.
*/}}
{{- define "pact-gateway.lifecycle" -}}
{{- $lifecycle := deepCopy (.Values.lifecycle | default dict) }}
{{- if and (not (hasKey $lifecycle "preStop")) (gt (int .Values.preStopSleepSeconds) 0) }}
{{- $_ := set $lifecycle "preStop" (dict "sleep" (dict "seconds" (int .Values.preStopSleepSeconds))) }}
{{- end }}
{{- with $lifecycle }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
The key/value pairs of the chart-managed Secret, as JSON: secrets.env (unless secrets.existingSecret)
the Redis password under redis.envVar (unless redis.existingSecret) and the Redis Cluster seed
nodes under redis.seedsEnvVar (unless redis.existingSecretSeedsKey). Every key is an
environment variable name; the Secret is loaded with envFrom.
*/}}
{{- define "pact-gateway.secretData" -}}
{{- $data := dict }}
{{- if not .Values.secrets.existingSecret }}
{{- range $name, $value := .Values.secrets.env }}
{{- $_ := set $data $name (toString $value) }}
{{- end }}
{{- end }}
{{- if and .Values.redis.password (not .Values.redis.existingSecret) }}
{{- $_ := set $data .Values.redis.envVar (toString .Values.redis.password) }}
{{- end }}
{{- if and .Values.redis.seeds (not (and .Values.redis.existingSecret .Values.redis.existingSecretSeedsKey)) }}
{{- $_ := set $data .Values.redis.seedsEnvVar (toString .Values.redis.seeds) }}
{{- end }}
{{- toJson $data }}
{{- end }}

{{/*
Name of the chart-managed Secret.
*/}}
{{- define "pact-gateway.secretName" -}}
{{- include "pact-gateway.fullname" . }}
{{- end }}

{{/*
Refuse values the gateway cannot run with, with a message that names the fix.
*/}}
{{- define "pact-gateway.validateValues" -}}
{{- $config := .Values.config | default dict }}
{{- /* gateway.config.SCHEMA's top-level required keys (scripts/gen_chart_schema.py leaves them out
of values.schema.json so this message, not "missing property", is what an empty config gets). */}}
{{- $missing := list }}
{{- range list "public_url" "provider" "brands" }}
{{- if not (hasKey $config .) }}
{{- $missing = append $missing (printf "config.%s" .) }}
{{- end }}
{{- end }}
{{- if $missing }}
{{- fail (printf "pact-gateway: %s not set: config is the gateway's config.yaml and the chart ships none (values.yaml leaves it empty so no placeholder leaks into a real release). Start from the chart's values-example.yaml (helm install REL CHART -f values-example.yaml -f my-values.yaml, or copy it) and see config/example.yaml." (join ", " $missing)) }}
{{- end }}
{{- $cacheUrl := dig "cache" "url" "memory://" $config | toString }}
{{- if hasPrefix "memory://" $cacheUrl }}
{{- if .Values.autoscaling.enabled }}
{{- fail "pact-gateway: autoscaling.enabled needs the shared Redis cache, but config.cache.url is memory:// (one process only). Set config.cache.url to redis:// or rediss:// (e.g. rediss://:${REDIS_PASSWORD}@redis:6380/0 with redis.password or redis.existingSecret)." }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "pact-gateway: replicaCount is %d but config.cache.url is memory:// (one process only); more than one replica needs the shared Redis cache. Set config.cache.url to redis:// or rediss:// (e.g. rediss://:${REDIS_PASSWORD}@redis:6380/0 with redis.password or redis.existingSecret)." (int .Values.replicaCount)) }}
{{- end }}
{{- if gt (int (.Values.workers | default 1)) 1 }}
{{- fail (printf "pact-gateway: workers is %d but config.cache.url is memory:// (one process only); more than one worker process needs the shared Redis cache. Set config.cache.url to redis:// or rediss://." (int .Values.workers)) }}
{{- end }}
{{- end }}
{{- if eq (toString (dig "metrics" "enabled" true $config)) "false" }}
{{- fail "pact-gateway: config.metrics.enabled is false, but the chart's probes and ServiceMonitor use the operations listener (/healthz, /readyz, /metrics). Leave it enabled." }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "pact-gateway: autoscaling.minReplicas must not exceed autoscaling.maxReplicas." }}
{{- end }}
{{- if eq (include "pact-gateway.httpPort" .) (include "pact-gateway.metricsPort" .) }}
{{- fail "pact-gateway: the A2A port and the metrics port must differ (containerPorts / config.listen.port / config.metrics.port)." }}
{{- end }}
{{- if or (lt (int (include "pact-gateway.httpPort" .)) 1) (lt (int (include "pact-gateway.metricsPort" .)) 1) }}
{{- fail "pact-gateway: config.listen.port and config.metrics.port must be fixed ports (1-65535) in a pod: with 0 (any free port) the probes, the Service and the NetworkPolicy have nothing to connect to." }}
{{- end }}
{{- /* Kubernetes kills the container when the grace period ends, preStop included: the pause and
the gateway's drain (20 s: gateway.config.LimitsConfig's shutdown_timeout default) must fit in it. */}}
{{- $pause := dig "preStop" "sleep" "seconds" 0 (include "pact-gateway.lifecycle" . | fromYaml) | float64 }}
{{- $drain := dig "limits" "shutdown_timeout" 20 $config | float64 }}
{{- $grace := .Values.terminationGracePeriodSeconds | float64 }}
{{- if le $grace (addf $pause $drain) }}
{{- fail (printf "pact-gateway: terminationGracePeriodSeconds is %v, but the preStop pause (%v s) and config.limits.shutdown_timeout (%v s) need %v s together: Kubernetes would kill the pod while it still answers requests. Set terminationGracePeriodSeconds above %v, or shorten preStopSleepSeconds (lifecycle.preStop) or config.limits.shutdown_timeout." $grace $pause $drain (addf $pause $drain) (addf $pause $drain)) }}
{{- end }}
{{- if .Values.metrics.prometheusRule.enabled }}
{{- $alerts := .Values.metrics.prometheusRule.alerts }}
{{- $enabled := list }}
{{- range $name, $alert := $alerts }}
{{- if $alert.enabled }}
{{- $enabled = append $enabled $name }}
{{- end }}
{{- end }}
{{- if not (or $enabled .Values.metrics.prometheusRule.extraRules) }}
{{- fail "pact-gateway: metrics.prometheusRule.enabled is true but every alert under metrics.prometheusRule.alerts is disabled and extraRules is empty: enable an alert, or set metrics.prometheusRule.enabled to false." }}
{{- end }}
{{- end }}
{{- /* An Ingress with no rule would route nothing (or, with a default backend, everything); the
chart ships no host, so the operator names theirs. */}}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- $host := (urlParse (toString (get $config "public_url"))).hostname | default "HOST" }}
{{- fail (printf "pact-gateway: ingress.enabled is true but ingress.hosts is empty: name the host(s) the Ingress routes to the gateway, e.g. ingress.hosts: [{host: %s, paths: [{path: /, pathType: Prefix}]}] (the host of config.public_url)." $host) }}
{{- end }}
{{- /* §5 signing keys read from files under signingKeys.mountPath need that Secret mounted. */}}
{{- range $index, $key := (dig "oauth" "signing_keys" list $config) }}
{{- $file := toString (get $key "file" | default "") }}
{{- if and $file (hasPrefix $.Values.signingKeys.mountPath $file) (not $.Values.signingKeys.existingSecret) }}
{{- fail (printf "pact-gateway: config.oauth.signing_keys[%d].file is %s, under signingKeys.mountPath, but signingKeys.existingSecret is not set. Create a Secret holding the key (kubectl create secret generic pact-gateway-signing-keys --from-file=signing.pem) and set signingKeys.existingSecret to its name." $index $file) }}
{{- end }}
{{- end }}
{{- /* Every ${VAR} the gateway expands (cache.url, upstream headers, signing keys, introspection
secrets) must be provided to the pod. */}}
{{- if not (or .Values.secrets.existingSecret .Values.extraEnvFrom) }}
{{- $provided := keys (include "pact-gateway.secretData" . | fromJson) }}
{{- if .Values.redis.existingSecret }}
{{- $provided = append $provided .Values.redis.envVar }}
{{- if .Values.redis.existingSecretSeedsKey }}
{{- $provided = append $provided .Values.redis.seedsEnvVar }}
{{- end }}
{{- end }}
{{- range .Values.extraEnv }}
{{- $provided = append $provided .name }}
{{- end }}
{{- $refs := regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}" $cacheUrl -1 }}
{{- range $brand := (get $config "brands" | default list) }}
{{- range $header, $value := (dig "upstream" "headers" dict $brand) }}
{{- $refs = concat $refs (regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}" (toString $value) -1) }}
{{- end }}
{{- $refs = concat $refs (regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}" (toString (dig "delegation" "introspection" "secret" "" $brand)) -1) }}
{{- end }}
{{- range $key := (dig "oauth" "signing_keys" list $config) }}
{{- $refs = concat $refs (regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}" (toString (get $key "value" | default "")) -1) }}
{{- end }}
{{- range $ref := $refs }}
{{- $name := $ref | trimPrefix "${" | trimSuffix "}" }}
{{- if not (has $name $provided) }}
{{- fail (printf "pact-gateway: config references ${%s}, but no value provides it. Set secrets.env.%s (or secrets.existingSecret), redis.password/redis.existingSecret with redis.envVar=%s, or an extraEnv entry." $name $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

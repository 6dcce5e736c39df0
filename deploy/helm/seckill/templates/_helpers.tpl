{{/* The name of every object: the release's, or the release's and the chart's. */}}
{{- define "seckill.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods. app.kubernetes.io/name is also the job the ServiceMonitor
gives the metrics: the alerts and the dashboard read job="seckill". */}}
{{- define "seckill.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "seckill.labels" -}}
{{ include "seckill.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The port the service listens on: the image's, SECKILL_ADDR's. */}}
{{- define "seckill.port" -}}8080{{- end -}}

{{/* The data dir, on an emptyDir: the root filesystem is read-only. */}}
{{- define "seckill.dataDir" -}}/data{{- end -}}

{{/* The scrape and rule evaluation interval the rules assume (their `for:` and 1m rates). */}}
{{- define "seckill.interval" -}}5s{{- end -}}

{{/* The Secret the pods read: the chart's, or one of the user's. */}}
{{- define "seckill.secretName" -}}
{{- .Values.secret.existingSecret | default (include "seckill.fullname" .) -}}
{{- end -}}

{{/* The chart refuses to render what cannot run as a replica set: a backend left unset would be
embedded in each replica, an admin token left unset made up by each. */}}
{{- define "seckill.validate" -}}
{{- $v := .Values -}}
{{- $missing := list -}}
{{- if not (or $v.backends.mysql.dsn $v.secret.existingSecret) }}{{ $missing = append $missing "backends.mysql.dsn" }}{{ end -}}
{{- if not $v.backends.redis.addrs }}{{ $missing = append $missing "backends.redis.addrs" }}{{ end -}}
{{- if not $v.backends.etcd.endpoints }}{{ $missing = append $missing "backends.etcd.endpoints" }}{{ end -}}
{{- if not $v.backends.nats.urls }}{{ $missing = append $missing "backends.nats.urls" }}{{ end -}}
{{- if $missing -}}
{{- fail (printf "set %s: a backend left unset is embedded in each replica, one of its own, and replicas cannot share an embedded store" (join ", " $missing)) -}}
{{- end -}}
{{- if not (or $v.secret.adminToken $v.secret.existingSecret) -}}
{{- fail "set secret.adminToken (or secret.existingSecret): left unset, each replica would make up a token of its own, and an admin call would work on one replica in N" -}}
{{- end -}}
{{- if not (and $v.image.repository $v.image.tag) -}}
{{- fail "set image.repository and image.tag: no image is published; build the repository's Dockerfile and push it to your registry" -}}
{{- end -}}
{{- range $name := list "SECKILL_ADDR" "SECKILL_DATA_DIR" "SECKILL_SHUTDOWN_TIMEOUT" "SECKILL_MYSQL_DSN" "SECKILL_REDIS_ADDRS" "SECKILL_REDIS_MODE" "SECKILL_REDIS_MASTER" "SECKILL_ETCD_ENDPOINTS" "SECKILL_NATS_URLS" "SECKILL_ZK_SERVERS" "SECKILL_ADMIN_TOKEN" -}}
{{- if hasKey $v.env $name -}}
{{- fail (printf "env.%s: the chart sets it itself (the listen address and the data dir are fixed; the backends, the admin token and the drain have values of their own)" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

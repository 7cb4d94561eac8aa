{{/*
The KubeSchedulerConfiguration: manifests/base/scheduler-config.yaml (why each field is as it
is: the comments there), with overlays/https's TLS and overlays/kueue's preemption switch as
values. kube-scheduler decodes it strictly and extender fields have no defaults.
*/}}
{{- define "railyard.schedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
# No kubeconfig: in-cluster credentials of the pod's ServiceAccount.
clientConnection:
  qps: {{ .Values.kubeScheduler.clientConnection.qps }}
  burst: {{ .Values.kubeScheduler.clientConnection.burst }}
# One replica leads; gang reservations are rebuilt by planning again after a failover.
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: {{ include "railyard.scheduler" . }}
  resourceNamespace: {{ .Release.Namespace }}
# Score every feasible node, so a gang member's planned node always reaches the extender.
percentageOfNodesToScore: 100
profiles:
{{- /* $sampled is the index: 0 (false) for the gang profile, 1 for the sampled one */}}
{{- range $sampled, $profile := list .Values.schedulerName (printf "%s-sampled" .Values.schedulerName) }}
  - schedulerName: {{ $profile }}
    {{- if $.Values.kueue.enabled }}
    # Beside Kueue: Kueue owns preemption (it evicts whole Workloads by its quotas).
    plugins:
      postFilter:
        disabled:
          - name: DefaultPreemption
    {{- end }}
    {{- if $sampled }}
    # Pods of no gang: feasible nodes for 5% of the cluster (at least 100), scored by best fit.
    percentageOfNodesToScore: 5
    {{- end }}
    # Best fit for single GPU pods, scored by kube-scheduler itself.
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - name: nvidia.com/gpu
                weight: 1
{{- end }}
extenders:
  - urlPrefix: {{ ternary "https" "http" .Values.tls.enabled }}://127.0.0.1:8888/scheduler
    filterVerb: filter
    # For a gang member railyard answers "none" and clears one domain itself, whole gangs only.
    preemptVerb: preempt
    # The gang gate: every member's bind is held until the whole gang is at bind.
    bindVerb: bind
    # Node names only; railyard keeps its own watch cache.
    nodeCacheCapable: true
    enableHTTPS: {{ .Values.tls.enabled }}
    {{- if .Values.tls.enabled }}
    tlsConfig:
      caFile: /etc/railyard/tls/ca.crt
      serverName: {{ include "railyard.tlsServerName" . }}
    {{- end }}
    # Only gang members reach the extender (templates/admission-policy.yaml gives them the marker);
    # with extender.steerLonePods, every pod asking for GPUs too (kube-scheduler still checks GPU fit).
    managedResources:
      - name: railyard.io/gang-member
        ignoredByScheduler: true
      {{- if .Values.extender.steerLonePods }}
      - name: nvidia.com/gpu
        ignoredByScheduler: false
      {{- end }}
    # Never skip the extender on errors: kube-scheduler would bind gang members one by one.
    ignorable: false
    # Must outlast the longest gang timeout held at bind, plus the Bindings' retries.
    httpTimeout: {{ .Values.extender.httpTimeout }}
{{- end -}}

{{/*
railyard's settings: manifests/base/railyard.yaml (or overlays/https's), then
.Values.railyard.settings over them. The verbs and gRPC stay on loopback: kube-scheduler is in
the same pod, and nothing else can reach bind.
*/}}
{{- define "railyard.settings" -}}
{{- $server := dict "listen" "127.0.0.1:8888" "prefix" "/scheduler" -}}
{{- $grpc := dict "listen" "127.0.0.1:8889" -}}
{{- if .Values.metrics.enabled -}}
{{- $_ := set $server "metrics_listen" "0.0.0.0:9090" -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- $files := dict "tls_cert_file" "/etc/railyard/tls/tls.crt" "tls_key_file" "/etc/railyard/tls/tls.key" -}}
{{- $server = merge $server $files -}}
{{- $grpc = merge $grpc $files (dict "client_ca_file" "/etc/railyard/tls/ca.crt") -}}
{{- end -}}
{{- $chart := dict "server" $server "grpc" $grpc -}}
{{- toYaml (mustMergeOverwrite $chart (deepCopy .Values.railyard.settings)) -}}
{{- end -}}

{{/* A DaemonSet of graft's node agents (graft-driver and graft-nri), called with
(list $ pool): "any" (every node: the nvidia backend is off), "plain" (the nodes the GPU node
selector leaves out: every backend but nvidia, unprivileged) or "gpu" (the GPU nodes: the
nvidia backend on, graft-driver privileged with the host's root at /host). The files that
call it say why each setting is what it is. */}}
{{- define "graft.daemonset" -}}
{{- $pool := index . 1 }}
{{- $gpu := eq $pool "gpu" }}
{{- $component := ternary "gpu-node" "node" $gpu }}
{{- with index . 0 }}
{{- $kubelet := .Values.kubeletDir | trimSuffix "/" -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "graft.fullname" . }}{{ if $gpu }}-gpu{{ end }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "graft.labels" (list . $component) | nindent 4 }}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: graft
      {{- if $gpu }}
      app.kubernetes.io/component: gpu-node
      {{- end }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: {{ .Values.updateStrategy.maxSurge }}
      maxUnavailable: {{ .Values.updateStrategy.maxUnavailable }}
  template:
    metadata:
      labels:
        {{- include "graft.labels" (list . $component) | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "graft.fullname" . }}
      # graft-driver's token only, through the api-token volume: graft-nri makes no API
      # calls and mounts none.
      automountServiceAccountToken: false
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      # A node agent: it talks to the kubelet and containerd over host sockets and to the
      # API server, and must not depend on a CNI plugin being up (or its devices).
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- with include "graft.podSchedulingFor" (list . $pool) | trim }}
      {{- . | nindent 6 }}
      {{- end }}
      terminationGracePeriodSeconds: 30
      # Both daemons run as root (uid 0: the state directory, the kubelet's plugin sockets
      # and containerd's NRI socket are root's) but with no capabilities at all: owning
      # those files is all they need. Nothing here is privileged but graft-driver in GPU
      # mode, for the reason given at the top.
      # RuntimeDefault holds for the unprivileged containers (graft-nri always, graft-driver
      # without GPU mode). containerd applies no seccomp profile to a privileged container,
      # whatever this says: graft-driver in GPU mode runs without one.
      securityContext:
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: graft-driver
          image: {{ include "graft.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: ["/usr/bin/graft-driver"]
          env:
            # The pod's IP (the node's: hostNetwork), for the metrics address below.
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            - name: POD_UID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.uid
            - name: GRAFT_DEVICE_CONFIG
              value: /etc/graft/devices.toml
            # The kubelet's root directory (values: kubeletDir), mounted at the same path:
            # the kubelet dials the sockets by the paths graft-driver registers.
            - name: GRAFT_KUBELET_DIR
              value: {{ $kubelet }}
            # The host's /dev is mounted below /host: over /dev it would hide the files
            # the kubelet mounts there (termination log).
            - name: GRAFT_HOST_ROOT
              value: /host
            - name: RUST_LOG
              value: {{ .Values.logLevel | quote }}
            # The device backends (values: backends).
            - name: GRAFT_DISCOVERY
              value: {{ include "graft.discovery" (list . $gpu) | required "backends: switch on at least one of char, files, nvidia, render" }}
            # Served directories (the files backend in devices.toml) lie below these host
            # paths; graft-nri allows mounts from them, and from nowhere else of the host.
            - name: GRAFT_ALLOWED_MOUNT_ROOTS
              value: {{ .Values.filesRoot }}
            {{- if $gpu }}
            # The driver installation's root as a host path (values: nvidia.driverRoot).
            - name: GRAFT_NVIDIA_DRIVER_ROOT
              value: {{ .Values.nvidia.driverRoot }}
            # GPU health (docs/nvidia.md: GPU health), values nvidia.healthTaintEffect and
            # nvidia.healthRecoverySeconds.
            - name: GRAFT_HEALTH_TAINT_EFFECT
              value: {{ .Values.nvidia.healthTaintEffect }}
            - name: GRAFT_HEALTH_RECOVERY_SECONDS
              value: {{ .Values.nvidia.healthRecoverySeconds | quote }}
            # XIDs that only degrade a GPU (values: nvidia.informationalXids).
            - name: GRAFT_HEALTH_INFORMATIONAL_XIDS
              value: {{ join "," .Values.nvidia.informationalXids | quote }}
            # GPUs graft partitions with dynamic MIG (docs/nvidia.md: Sharing a GPU).
            - name: GRAFT_NVIDIA_DYNAMIC_MIG
              value: {{ .Values.nvidia.dynamicMig | quote }}
            # GPUs shared through MPS (docs/nvidia.md: Sharing a GPU).
            - name: GRAFT_NVIDIA_MPS
              value: {{ .Values.nvidia.mps | quote }}
            # Seconds between reads of each GPU's usage for graft_gpu_* (0: off).
            - name: GRAFT_NVIDIA_USAGE_SECONDS
              value: {{ .Values.nvidia.usageMetricsSeconds | quote }}
            {{- if ne (toString .Values.nvidia.timeSlicing.gpus) "none" }}
            # GPUs time-sliced among claims, as replicas (docs/nvidia.md: Sharing a GPU).
            - name: GRAFT_NVIDIA_TIME_SLICING
              value: {{ .Values.nvidia.timeSlicing.gpus | quote }}
            - name: GRAFT_NVIDIA_TIME_SLICING_REPLICAS
              value: {{ .Values.nvidia.timeSlicing.replicas | quote }}
            {{- end }}
            # An MPS GPU's tenant namespace as a device taint, with 56-mps-tenancy.yaml's
            # policies adding and checking the claims' tolerations.
            - name: GRAFT_NVIDIA_MPS_TENANT_TAINT
              value: {{ include "graft.mpsTenantTaint" . | quote }}
            # VFIO passthrough (docs/nvidia.md: VFIO passthrough), values nvidia.passthrough.
            - name: GRAFT_NVIDIA_PASSTHROUGH
              value: {{ .Values.nvidia.passthrough.enabled | quote }}
            - name: GRAFT_NVIDIA_VFIO_TIMEOUT
              value: {{ .Values.nvidia.passthrough.timeoutSeconds | quote }}
            # IMEX channels (and ComputeDomain daemon slots) per node (values:
            # nvidia.imexChannels).
            - name: GRAFT_NVIDIA_IMEX_CHANNELS
              value: {{ int .Values.nvidia.imexChannels | quote }}
            {{- if .Values.computeDomains.enabled }}
            # The node's clique as a node label (needs the node patch ComputeDomains grant).
            - name: GRAFT_NVIDIA_CLIQUE_LABEL
              value: "true"
            {{- end }}
            {{- if .Values.nvidia.allowDevicePluginCoexistence }}
            # Publish GPUs even where a GPU device plugin advertises its resources.
            - name: GRAFT_ALLOW_DEVICE_PLUGIN_COEXISTENCE
              value: "true"
            {{- end }}
            {{- with .Values.nvidia.devicePluginResources }}
            # More resources that mean a GPU device plugin runs on the node.
            - name: GRAFT_DEVICE_PLUGIN_RESOURCES
              value: {{ join "," . | quote }}
            {{- end }}
            {{- end }}
            {{- if .Values.podCache }}
            # The node's pods from a watch (values: podCache; the role's list and watch).
            - name: GRAFT_POD_CACHE
              value: "true"
            {{- end }}
            # Log lines as text or one JSON object each (values: logFormat).
            - name: GRAFT_LOG_FORMAT
              value: {{ .Values.logFormat | quote }}
            # Metrics address (values: metrics; $(POD_IP) is expanded by the kubelet).
            - name: GRAFT_METRICS_ADDR
              value: {{ .Values.metrics.driverAddr | quote }}
            {{- with .Values.driverExtraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          # Ready: registered with the kubelet and the node's ResourceSlices published.
          # Live: the daemon answers (it does not depend on the API server).
          readinessProbe:
            exec: {command: ["/usr/bin/graft-driver", "--probe", "ready"]}
            periodSeconds: 5
            timeoutSeconds: 5
          livenessProbe:
            exec: {command: ["/usr/bin/graft-driver", "--probe", "live"]}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          {{- with .Values.resources.driver }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- if $gpu }}
            privileged: true
            {{- end }}
            runAsUser: 0
            readOnlyRootFilesystem: true
            {{- if not $gpu }}
            allowPrivilegeEscalation: false
            capabilities: {drop: ["ALL"]}
            {{- end }}
          volumeMounts:
            - {name: plugins-registry, mountPath: {{ $kubelet }}/plugins_registry}
            - {name: plugins, mountPath: {{ $kubelet }}/plugins}
            - {name: state, mountPath: /var/lib/graft}
            - {name: devices-config, mountPath: /etc/graft, readOnly: true}
            {{- include "graft.apiTokenMount" . | nindent 12 }}
            {{- if $gpu }}
            # The host's /dev and served directories are visible under the host root.
            - {name: host-root, mountPath: /host, readOnly: true}
            {{- else }}
            - {name: host-dev, mountPath: /host/dev, readOnly: true}
            {{- end }}
            - {name: host-sys, mountPath: /sys, readOnly: true}
            {{- if and $gpu .Values.nvidia.passthrough.enabled }}
            # Passthrough writes these (see the top of this file).
            - {name: host-pci-drivers, mountPath: /sys/bus/pci/drivers}
            - {name: host-devices, mountPath: /sys/devices}
            {{- end }}
            {{- if not $gpu }}
            - {name: host-files, mountPath: /host{{ .Values.filesRoot }}, readOnly: true}
            {{- end }}
            - {name: run-graft, mountPath: /run/graft}
            {{- with .Values.driverExtraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
        {{- /* graft-nri, and graft's NRI validator (the same binary with --validate, a
        process of its own so that it outlives graft-nri's death): the same settings, so
        that the validator plans each container exactly as graft-nri does. */}}
        {{- $root := . }}
        {{- range $validate := ternary (list false true) (list false) .Values.nriValidator.enabled }}
        {{- with $root }}
        - name: {{ ternary "graft-nri-validator" "graft-nri" $validate }}
          image: {{ include "graft.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: ["/usr/bin/graft-nri", "--socket", {{ .Values.nriSocket | quote }}, "--state-dir", "/var/lib/graft"{{ if $validate }}, "--validate"{{ end }}]
          env:
            {{- if not $validate }}
            # The pod's IP (the node's: hostNetwork).
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- end }}
            - name: RUST_LOG
              value: {{ .Values.logLevel | quote }}
            - name: GRAFT_ALLOWED_MOUNT_ROOTS
              value: {{ .Values.filesRoot }}
            # graft-nri looks at a served entry once more before a container gets it:
            # still there, and not a symlink.
            - name: GRAFT_HOST_ROOT
              value: /host
            {{- if $gpu }}
            - name: GRAFT_NVIDIA_DRIVER_ROOT
              value: {{ .Values.nvidia.driverRoot }}
            - name: GRAFT_NRI_UNCLAIMED_GPU_REQUESTS
              value: {{ .Values.nvidia.unclaimedGpuRequests | default (ternary "keep" "clear" .Values.nvidia.allowDevicePluginCoexistence) | quote }}
            {{- end }}
            - name: GRAFT_LOG_FORMAT
              value: {{ .Values.logFormat | quote }}
            {{- if not $validate }}
            - name: GRAFT_METRICS_ADDR
              value: {{ .Values.metrics.nriAddr | quote }}
            {{- end }}
            {{- with .Values.nriExtraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if $validate }}
          # Ready once containerd configured it (or, on a containerd without validation,
          # idle: nothing to wait for).
          readinessProbe:
            exec: {command: ["/usr/bin/graft-nri", "--validate", "--probe", "ready"]}
            periodSeconds: 5
            timeoutSeconds: 5
          livenessProbe:
            exec: {command: ["/usr/bin/graft-nri", "--validate", "--probe", "live"]}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          {{- else }}
          # Ready: connected and synchronized with containerd; a new instance waiting for
          # the old one to exit is ready while the old one is (it serves the node).
          readinessProbe:
            exec: {command: ["/usr/bin/graft-nri", "--probe", "ready"]}
            periodSeconds: 5
            timeoutSeconds: 5
          livenessProbe:
            exec: {command: ["/usr/bin/graft-nri", "--probe", "live"]}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          {{- end }}
          {{- with .Values.resources.nri }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            runAsUser: 0
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: ["ALL"]}
          volumeMounts:
            - {name: nri, mountPath: {{ dir .Values.nriSocket }}}
            - {name: state, mountPath: /var/lib/graft}
            - {name: host-files, mountPath: /host{{ .Values.filesRoot }}, readOnly: true}
            - {name: run-graft, mountPath: /run/graft}
        {{- end }}
        {{- end }}
      volumes:
        - name: plugins-registry
          hostPath: {path: {{ $kubelet }}/plugins_registry, type: DirectoryOrCreate}
        - name: plugins
          hostPath: {path: {{ $kubelet }}/plugins, type: DirectoryOrCreate}
        - name: state
          hostPath: {path: /var/lib/graft, type: DirectoryOrCreate}
        - name: nri
          hostPath: {path: {{ dir .Values.nriSocket }}, type: DirectoryOrCreate}
        {{- if $gpu }}
        - name: host-root
          hostPath: {path: /, type: Directory}
        {{- else }}
        - name: host-dev
          hostPath: {path: /dev, type: Directory}
        {{- end }}
        - name: host-sys
          hostPath: {path: /sys, type: Directory}
        {{- if and $gpu .Values.nvidia.passthrough.enabled }}
        - name: host-pci-drivers
          hostPath: {path: /sys/bus/pci/drivers, type: Directory}
        - name: host-devices
          hostPath: {path: /sys/devices, type: Directory}
        {{- end }}
        # The files backend's served directories (see devices.toml); serving one elsewhere
        # takes a hostPath of its own and GRAFT_ALLOWED_MOUNT_ROOTS in both containers.
        - name: host-files
          hostPath: {path: {{ .Values.filesRoot }}, type: DirectoryOrCreate}
        - name: devices-config
          configMap:
            name: {{ include "graft.fullname" . }}-devices
        # graft-driver's API token (graft.apiTokenVolume).
        {{- include "graft.apiTokenVolume" . | nindent 8 }}
        # The probe sockets (driver.sock, nri.sock): this pod's own, whatever else runs.
        - name: run-graft
          emptyDir: {sizeLimit: 1Mi}
        {{- with .Values.driverExtraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end }}
{{- end }}

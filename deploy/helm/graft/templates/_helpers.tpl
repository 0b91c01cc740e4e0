{{/* The image both containers run. */}}
{{- define "graft.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* GRAFT_DISCOVERY: the backends switched on, in a fixed order. */}}
{{- define "graft.discovery" -}}
{{- $on := list -}}
{{- range $b := list "char" "files" "nvidia" -}}
{{- if index $.Values.backends $b }}{{ $on = append $on $b }}{{ end -}}
{{- end -}}
{{- required "backends: switch on at least one of char, files, nvidia" (join "," $on | default "") -}}
{{- end }}

{{/* The MutatingAdmissionPolicy API version: the value, or v1 where the cluster serves it. */}}
{{- define "graft.mapVersion" -}}
{{- if .Values.requireGraftNri.apiVersion -}}
{{ .Values.requireGraftNri.apiVersion }}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end }}

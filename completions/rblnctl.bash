_rblnctl_completion() {
    local IFS=$'\n'
    local response line
    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD \
        _RBLNCTL_COMPLETE=complete_bash "$1" 2>/dev/null)
    COMPREPLY=()
    for line in $response; do
        case "$line" in
            file,*) compopt -o default; COMPREPLY=(); return 0 ;;
            dir,*) compopt -o dirnames; COMPREPLY=(); return 0 ;;
            plain,*) COMPREPLY+=("${line#plain,}") ;;
        esac
    done
    return 0
}

complete -o nosort -F _rblnctl_completion rblnctl

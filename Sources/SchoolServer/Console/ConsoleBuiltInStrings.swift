/// The console's words in English and Korean, in the strings file format
/// (BlockPage's `StringsFile`). English defines the keys. `{name}` is a
/// placeholder the page fills in; keep it in a translation, anywhere in the sentence.
enum ConsoleBuiltInStrings {
    static let others: [(language: String, text: String)] = [("ko", korean)]

    static let english = """
        # Text direction of the language: ltr or rtl.
        direction = ltr
        # The language's own name, in the language menu.
        languageName = English

        # Every page.
        skipToContent = Skip to the content
        navLabel = Console
        signedInAs = Signed in as
        signOut = Sign out
        signOutEverywhere = Sign out everywhere
        language = Language
        languageApply = Show
        pagesLabel = Pages
        firstPage = First page
        nextPage = Next page
        backToDashboard = Back to the dashboard
        search = Search
        show = Show
        clearFilters = Clear the filters
        dateRange = Dates
        since = From
        until = To
        timeZoneNote = Days in the server's time zone, {zone}; both days included.
        scopeNote = You see only your part of the school: rooms {rooms}; groups {groups}.
        none = none

        # The menu and the pages' titles.
        navDashboard = Dashboard
        navRecords = Records
        navMachines = Machines
        navPolicy = Policy
        navPeople = People
        navAudit = Audit trail
        titleSignIn = Sign in
        titleDashboard = Dashboard
        titleRecords = Records
        titleTimeline = Timeline of {user}
        titleMachines = Machines
        titlePolicy = Policy
        titlePolicyVersion = Policy version {version}
        titlePolicyDiff = Policy version {from} to {to}
        titlePeople = People
        titleAudit = Audit trail
        titleRefused = Not allowed
        titleNotFound = Not found

        # Roles.
        roleAdmin = IT admin
        roleSafeguarding = Safeguarding lead
        roleTeacher = Teacher
        roleAuditor = Auditor
        roleMetrics = Metrics

        # Refusals and errors.
        refused = Your role does not allow this page or this action.
        refusedScope = This is outside your part of the school.
        notFound = There is no such page.
        errorDates = Give dates as days such as 2025-11-28, the first not after the last.
        errorMachineID = A machine id is m- and 20 letters and digits, as the machines page shows it.
        errorTooLong = A filter is too long or holds a control character.
        errorCursor = That page link is not one this server made; start from the first page.
        errorPseudonym = No one in the records has the pseudonym {name}.
        errorUserRequired = Give the user whose timeline to show.
        errorForm = The form could not be read; send it again from its page.

        # Sign-in.
        login = Login
        password = Password
        signIn = Sign in
        signInError = The login or the password is not right, or the account is locked for a while.
        signInSchoolAccount = Sign in with the school's account
        signInOpenIDError = Signing in with the school's account did not work, or that account has no role in this console. Ask the school's admin.

        # Dashboard.
        dashboardMachines = Machines by state
        dashboardBlocks = Blocks in the last hour, by category
        dashboardTopBlocked = Most blocked names in the last hour
        dashboardRequests = Access requests
        requestsNotYet = The server does not collect access requests from the block page yet, so there is nothing to review here.
        windowText = From {from} to {to} ({zone}).
        machineState = State
        machinesCount = Machines
        blocks = Blocks
        noMachines = No machines.
        noBlocks = Nothing was blocked.
        noCategory = (no category)

        # Machine states.
        stateAll = All states
        stateOk = Filtering
        stateStale = Stale
        stateUnfiltered = Unfiltered
        stateBehind = Behind
        stateRevoked = Revoked

        # Records and the timeline.
        recordsFilters = Filter the records
        recordsCaption = Records, oldest first
        timelineCaption = This person's records, oldest first
        timelineNote = Opening a person's timeline is written to the audit trail.
        pseudonymsNote = People are shown by pseudonym; search by the pseudonym.
        exportCSV = Export these records as CSV
        noRecords = No records match.
        time = Time
        user = User
        machine = Machine
        machineID = Machine id
        room = Room
        group = Group
        kind = Kind
        host = Name
        action = Action
        category = Category
        reason = Reason
        author = Author
        actionAny = Any
        actionBlock = Blocked
        actionAllow = Allowed

        # Machines.
        machinesFilter = Filter the machines
        machinesCaption = Enrolled machines
        machinesPublished = The published bundle is version {version}.
        hostname = Host name
        rulesVersion = Rules version
        lastCheckIn = Last check-in
        never = never
        filterDataRestarts = filter-data restarts
        queueDrops = Queue drops
        recordsDropped = Records dropped
        revokeHeading = Enrolment
        revoke = Revoke
        revokeConfirm = Revoke this machine's enrolment? It must enrol again with a new token.
        flashRevoked = The machine's enrolment is revoked.

        # Policy.
        policyNone = There is no policy version yet.
        policyCurrent = Version {version} of {time}, by {author}: {reason}
        policyPublished = Machines are served bundle {bundle} (policy version {version}), published {time}.
        policyPending = Bundle {bundle} waits for its signature (hallpass-server publish complete).
        policyNotPublished = Nothing is published yet.
        policySummary = Summary
        policyTimeZone = Time zone of the schedules
        policyMachineZone = each machine's own
        policyEveryone = Blocked for people in no group
        policyLocked = Blocked for everyone
        policySafeSearch = SafeSearch
        policyOverrides = Teachers' overrides on a machine
        policyGroups = Groups
        policyMembers = Members
        policyBlocked = Blocked categories
        policyDuring = During schedules
        policyExam = Exam
        policyExamExempt = exempt
        policyExamText = Allowed during an exam: {allow}. Groups: {groups}. During: {during}.
        policyExamNone = No exam settings.
        policyExamAllGroups = every group not exempt
        policyAllCategories = all categories
        policyNoGroups = No groups: everyone gets the top-level keys.
        policySchedules = Schedules
        policySchedule = Schedule
        policyDays = Days
        policyTimes = Times
        policyNoSchedules = No schedules.
        policyBypass = Ways around the filter
        policyBypassKey = Key
        policyBypassValue = Value
        policyYAML = Policy file (YAML)
        policyRefused = The policy is refused; nothing was saved:
        policySave = Save as a new version
        reasonRequired = Reason (required)
        policyPublish = Publish
        policyPublishButton = Publish the latest version to the machines
        policyHistory = History
        policyVersion = Version
        policyChanges = Changes
        policyDiffPrevious = Compare with the version before
        policyNoHistory = No versions yet.
        policyRollback = Roll back
        policyRollbackTo = Make a new version with the content of version
        policyRollbackButton = Roll back
        policyBack = Back to the policy
        policyNoFile = This version has no policy file: machines apply their own.
        policyLists = Lists
        policyNoLists = No lists.
        policyNames = Names
        policyAdded = Added
        policyRemoved = Removed
        policySample = First names added (+) and removed (−)
        policySame = The policy file is the same.
        policyListsSame = The lists are the same.
        policyVersionMeta = {time}, by {author}: {reason}
        flashPolicySaved = Policy version {version} is saved. Publish it to send it to the machines.
        flashPublished = Bundle {version} is published.
        flashPublishPending = Bundle {version} is built and waits for its signature.
        flashPersonAdded = The account is added.
        flashPersonChanged = The account is changed.
        peopleErrorLogin = A login is 1 to 64 of a-z, 0-9, '.', '_', '-' and '@'.
        peopleErrorRole = A teacher needs at least one room or group, and an admin has none.
        peopleErrorPassword = A password is 10 to 72 characters.
        peopleErrorExists = There is an account with this login already.
        peopleErrorName = A name is 1 to 200 characters.
        peopleErrorSelf = You cannot change your own role or scope, or disable yourself: ask another admin.
        peopleErrorNoChange = Nothing was changed.
        peopleErrorScope = A room or group name is at most 256 characters.
        flashRolledBack = Policy version {version} is saved with the content of the version chosen.

        # People.
        peopleCaption = Console accounts
        peopleLogin = Login
        peopleName = Name
        peopleRole = Role
        peopleRooms = Rooms
        peopleGroups = Groups
        peopleMethod = Sign-in
        peopleStatus = Status
        peopleLastSignIn = Last sign-in
        peopleChange = Change
        peopleEnabled = May sign in
        peopleSave = Save
        peopleActive = active
        peopleDisabled = disabled
        peopleNone = No accounts yet.
        peopleAdd = Add a person
        peopleAddButton = Add
        peopleScopeHelp = Rooms and groups separated by commas. A teacher needs at least one; empty for the others is the whole school.
        peoplePasswordHelp = For a local account; leave empty for one that signs in with the school's account.

        # Audit trail.
        auditFilters = Filter the audit trail
        auditCaption = Audit events, newest first
        auditActor = Who
        auditAction = What
        auditTarget = On what
        auditNone = No events match.
        """

    static let korean = """
        direction = ltr
        languageName = 한국어

        skipToContent = 본문으로 건너뛰기
        navLabel = 콘솔
        signedInAs = 로그인 사용자
        signOut = 로그아웃
        signOutEverywhere = 모든 기기에서 로그아웃
        language = 언어
        languageApply = 보기
        pagesLabel = 페이지
        firstPage = 첫 페이지
        nextPage = 다음 페이지
        backToDashboard = 대시보드로 돌아가기
        search = 검색
        show = 보기
        clearFilters = 필터 지우기
        dateRange = 날짜
        since = 시작일
        until = 종료일
        timeZoneNote = 서버 시간대({zone}) 기준 날짜이며, 두 날짜를 모두 포함합니다.
        scopeNote = 담당 범위만 표시됩니다: 교실 {rooms}, 그룹 {groups}.
        none = 없음

        navDashboard = 대시보드
        navRecords = 기록
        navMachines = 컴퓨터
        navPolicy = 정책
        navPeople = 사용자
        navAudit = 감사 기록
        titleSignIn = 로그인
        titleDashboard = 대시보드
        titleRecords = 기록
        titleTimeline = {user}의 타임라인
        titleMachines = 컴퓨터
        titlePolicy = 정책
        titlePolicyVersion = 정책 버전 {version}
        titlePolicyDiff = 정책 버전 {from} → {to}
        titlePeople = 사용자
        titleAudit = 감사 기록
        titleRefused = 허용되지 않음
        titleNotFound = 찾을 수 없음

        roleAdmin = IT 관리자
        roleSafeguarding = 학생 보호 책임자
        roleTeacher = 교사
        roleAuditor = 감사자
        roleMetrics = 지표

        refused = 이 역할로는 이 페이지를 보거나 이 작업을 할 수 없습니다.
        refusedScope = 담당 범위 밖의 항목입니다.
        notFound = 이 페이지는 없습니다.
        errorDates = 날짜는 2025-11-28 같은 형식으로 입력하고, 시작일이 종료일보다 늦지 않아야 합니다.
        errorMachineID = 컴퓨터 ID는 m-과 영문자·숫자 20자로, 컴퓨터 페이지에 표시된 그대로입니다.
        errorTooLong = 필터가 너무 길거나 제어 문자가 들어 있습니다.
        errorCursor = 이 서버가 만든 페이지 링크가 아닙니다. 첫 페이지부터 다시 보세요.
        errorPseudonym = 기록에 가명 {name}인 사람이 없습니다.
        errorUserRequired = 타임라인을 볼 사용자를 입력하세요.
        errorForm = 양식을 읽을 수 없습니다. 해당 페이지에서 다시 보내 주세요.

        login = 아이디
        password = 비밀번호
        signIn = 로그인
        signInError = 아이디나 비밀번호가 맞지 않거나, 계정이 잠시 잠겨 있습니다.
        signInSchoolAccount = 학교 계정으로 로그인
        signInOpenIDError = 학교 계정으로 로그인하지 못했거나, 그 계정에 이 콘솔의 역할이 없습니다. 학교 관리자에게 문의하세요.

        dashboardMachines = 상태별 컴퓨터
        dashboardBlocks = 최근 1시간 분류별 차단
        dashboardTopBlocked = 최근 1시간 가장 많이 차단된 이름
        dashboardRequests = 접근 요청
        requestsNotYet = 서버가 아직 차단 페이지의 접근 요청을 받지 않으므로 검토할 요청이 없습니다.
        windowText = {from}부터 {to}까지 ({zone}).
        machineState = 상태
        machinesCount = 컴퓨터 수
        blocks = 차단 수
        noMachines = 컴퓨터가 없습니다.
        noBlocks = 차단된 것이 없습니다.
        noCategory = (분류 없음)

        stateAll = 모든 상태
        stateOk = 필터링 중
        stateStale = 응답 없음
        stateUnfiltered = 필터링 안 됨
        stateBehind = 규칙 뒤처짐
        stateRevoked = 등록 취소됨

        recordsFilters = 기록 필터
        recordsCaption = 기록 (오래된 순)
        timelineCaption = 이 사람의 기록 (오래된 순)
        timelineNote = 타임라인을 열면 감사 기록에 남습니다.
        pseudonymsNote = 사람은 가명으로 표시됩니다. 가명으로 검색하세요.
        exportCSV = 이 기록을 CSV로 내보내기
        noRecords = 일치하는 기록이 없습니다.
        time = 시각
        user = 사용자
        machine = 컴퓨터
        machineID = 컴퓨터 ID
        room = 교실
        group = 그룹
        kind = 종류
        host = 이름
        action = 조치
        category = 분류
        reason = 사유
        author = 작성자
        actionAny = 전체
        actionBlock = 차단
        actionAllow = 허용

        machinesFilter = 컴퓨터 필터
        machinesCaption = 등록된 컴퓨터
        machinesPublished = 배포된 번들은 버전 {version}입니다.
        hostname = 호스트 이름
        rulesVersion = 규칙 버전
        lastCheckIn = 마지막 보고
        never = 없음
        filterDataRestarts = filter-data 재시작
        queueDrops = 큐 손실
        recordsDropped = 버려진 기록
        revokeHeading = 등록
        revoke = 등록 취소
        revokeConfirm = 이 컴퓨터의 등록을 취소할까요? 새 토큰으로 다시 등록해야 합니다.
        flashRevoked = 컴퓨터의 등록을 취소했습니다.

        policyNone = 아직 정책 버전이 없습니다.
        policyCurrent = 버전 {version} ({time}, {author}): {reason}
        policyPublished = 컴퓨터에 번들 {bundle}(정책 버전 {version})이 배포되고 있습니다. 배포 시각 {time}.
        policyPending = 번들 {bundle}이 서명을 기다리고 있습니다 (hallpass-server publish complete).
        policyNotPublished = 아직 배포된 것이 없습니다.
        policySummary = 요약
        policyTimeZone = 일정의 시간대
        policyMachineZone = 각 컴퓨터의 시간대
        policyEveryone = 그룹이 없는 사람에게 차단
        policyLocked = 모두에게 차단
        policySafeSearch = 세이프서치
        policyOverrides = 교사의 컴퓨터별 예외
        policyGroups = 그룹
        policyMembers = 구성원
        policyBlocked = 차단 분류
        policyDuring = 일정별 설정
        policyExam = 시험
        policyExamExempt = 제외
        policyExamText = 시험 중 허용: {allow}. 그룹: {groups}. 일정: {during}.
        policyExamNone = 시험 설정이 없습니다.
        policyExamAllGroups = 제외되지 않은 모든 그룹
        policyAllCategories = 모든 분류
        policyNoGroups = 그룹이 없습니다. 모두 최상위 설정을 따릅니다.
        policySchedules = 일정
        policySchedule = 일정
        policyDays = 요일
        policyTimes = 시간
        policyNoSchedules = 일정이 없습니다.
        policyBypass = 필터 우회 방법
        policyBypassKey = 키
        policyBypassValue = 값
        policyYAML = 정책 파일 (YAML)
        policyRefused = 정책이 거부되어 저장되지 않았습니다:
        policySave = 새 버전으로 저장
        reasonRequired = 사유 (필수)
        policyPublish = 배포
        policyPublishButton = 최신 버전을 컴퓨터에 배포
        policyHistory = 이력
        policyVersion = 버전
        policyChanges = 변경 내용
        policyDiffPrevious = 이전 버전과 비교
        policyNoHistory = 아직 버전이 없습니다.
        policyRollback = 되돌리기
        policyRollbackTo = 다음 버전의 내용으로 새 버전 만들기
        policyRollbackButton = 되돌리기
        policyBack = 정책으로 돌아가기
        policyNoFile = 이 버전에는 정책 파일이 없어 각 컴퓨터의 설정을 따릅니다.
        policyLists = 목록
        policyNoLists = 목록이 없습니다.
        policyNames = 이름 수
        policyAdded = 추가
        policyRemoved = 삭제
        policySample = 추가(+)·삭제(−)된 처음 이름들
        policySame = 정책 파일은 같습니다.
        policyListsSame = 목록은 같습니다.
        policyVersionMeta = {time}, {author}: {reason}
        flashPolicySaved = 정책 버전 {version}을 저장했습니다. 컴퓨터에 보내려면 배포하세요.
        flashPublished = 번들 {version}을 배포했습니다.
        flashPublishPending = 번들 {version}을 만들었고 서명을 기다리고 있습니다.
        flashPersonAdded = 계정을 추가했습니다.
        flashPersonChanged = 계정을 변경했습니다.
        peopleErrorLogin = 아이디는 a-z, 0-9, '.', '_', '-', '@'로 된 1~64자입니다.
        peopleErrorRole = 교사에게는 교실이나 그룹이 하나 이상 필요하고, 관리자에게는 없어야 합니다.
        peopleErrorPassword = 비밀번호는 10~72자입니다.
        peopleErrorExists = 이 아이디의 계정이 이미 있습니다.
        peopleErrorName = 이름은 1~200자입니다.
        peopleErrorSelf = 자신의 역할이나 범위를 바꾸거나 자신을 비활성화할 수 없습니다. 다른 관리자에게 요청하세요.
        peopleErrorNoChange = 바뀐 것이 없습니다.
        peopleErrorScope = 교실이나 그룹 이름은 256자 이하입니다.
        flashRolledBack = 선택한 버전의 내용으로 정책 버전 {version}을 저장했습니다.

        peopleCaption = 콘솔 계정
        peopleLogin = 아이디
        peopleName = 이름
        peopleRole = 역할
        peopleRooms = 교실
        peopleGroups = 그룹
        peopleMethod = 로그인 방식
        peopleStatus = 상태
        peopleLastSignIn = 마지막 로그인
        peopleChange = 변경
        peopleEnabled = 로그인 허용
        peopleSave = 저장
        peopleActive = 사용 중
        peopleDisabled = 사용 중지
        peopleNone = 아직 계정이 없습니다.
        peopleAdd = 사용자 추가
        peopleAddButton = 추가
        peopleScopeHelp = 교실과 그룹은 쉼표로 구분합니다. 교사는 하나 이상 필요하며, 다른 역할은 비워 두면 학교 전체입니다.
        peoplePasswordHelp = 로컬 계정용입니다. 학교 계정으로 로그인하는 사용자는 비워 두세요.

        auditFilters = 감사 기록 필터
        auditCaption = 감사 기록 (최신 순)
        auditActor = 누가
        auditAction = 무엇을
        auditTarget = 대상
        auditNone = 일치하는 기록이 없습니다.
        """
}
